import Testing

@testable import AuthProxyCore

struct APIKeyConfigTests {
    let loader = ConfigLoader(environment: ["K1": "secret-key-one", "K2": "secret-key-two"])

    func credential(_ body: String) -> String {
        "[[credential]]\nname = \"a\"\ntype = \"api-key\"\nmatch = \"https://h\"\n" + body
    }

    @Test func twoSlotsWithExpiriesAndAReferer() throws {
        let c = try loader.parse(
            credential(
                """
                keys = [{ key = "${K1}", expires = "2027-05-01T00:00:00Z" },
                        { key = "${K2}", expires = 2027-11-01T00:00:00Z }]
                referer = "https://app.example.com/"
                """))
        let k = try #require(c.credentials[0].apiKey)
        #expect(k.slots.map(\.key) == ["secret-key-one", "secret-key-two"])
        #expect(k.slots.map(\.number) == [1, 2])
        #expect(k.slots[0].expires == parseRFC3339("2027-05-01T00:00:00Z"))
        #expect(k.slots[1].expires == parseRFC3339("2027-11-01T00:00:00Z"))
        #expect(k.referer == "https://app.example.com/")
        #expect(c.credentials[0].retriesRejections)
    }

    @Test func oneKeyMayHaveAnExpiry() throws {
        let c = try loader.parse(credential("key = \"${K1}\"\nexpires = \"2027-05-01T00:00:00Z\"\n"))
        let k = try #require(c.credentials[0].apiKey)
        #expect(k.slots == [.init(number: 1, key: "secret-key-one", expires: parseRFC3339("2027-05-01T00:00:00Z"))])
        #expect(!c.credentials[0].retriesRejections)
    }

    @Test(arguments: [
        (
            "key = \"${K1}\"\nkeys = [{ key = \"${K2}\", expires = \"2027-05-01T00:00:00Z\" }]\n", "credential[0].keys",
            "not both"
        ),
        ("keys = []\n", "credential[0].keys", "one or two slots"),
        (
            "keys = [{ key = \"a\", expires = \"2027-05-01T00:00:00Z\" }, { key = \"b\", expires = \"2027-05-01T00:00:00Z\" }, { key = \"c\", expires = \"2027-05-01T00:00:00Z\" }]\n",
            "credential[0].keys", "one or two slots"
        ),
        ("keys = [{ key = \"${K1}\" }]\n", "credential[0].keys[0].expires", "needs expires"),
        ("keys = [{ key = \"${K1}\", expires = \"next may\" }]\n", "credential[0].keys[0].expires", "RFC 3339"),
        ("keys = [{ key = \"${K1}\", expires = 2027 }]\n", "credential[0].keys[0].expires", "RFC 3339"),
        ("keys = [{ expires = \"2027-05-01T00:00:00Z\" }]\n", "credential[0].keys[0].key", "slot 1 needs a key"),
        (
            "keys = [{ key = \"${K1}\", expires = \"2027-05-01T00:00:00Z\", referer = \"x\" }]\n",
            "credential[0].keys[0].referer", "unknown key"
        ),
        (
            "keys = [{ key = \"${K1}\", expires = \"2027-05-01T00:00:00Z\" }, { key = \"${K1}\", expires = \"2027-06-01T00:00:00Z\" }]\n",
            "credential[0].keys[1].key", "same key as slot 1"
        ),
        ("keys = [\"${K1}\"]\n", "credential[0].keys", "a table"),
        ("key = \"${K1}\"\nexpires = \"soon\"\n", "credential[0].expires", "RFC 3339"),
        ("key = \"${K1}\"\nreferer = \"a\\u0001b\"\n", "credential[0].referer", "the value"),
        ("key = \"secret key\"\n", "credential[0].key", "not visible ASCII"),
    ])
    func rejects(_ body: String, _ key: String, _ fragment: String) {
        do {
            _ = try loader.parse(credential(body))
            Issue.record("accepted: \(body)")
        } catch {
            #expect(error.key == key, "\(error)")
            #expect(error.description.contains(fragment), "\(error)")
            #expect(!error.description.contains("secret-key"))
        }
    }
}
