import Testing

@testable import AuthProxyCore

@Suite struct AddressBlockTests {
    @Test(arguments: [
        ("127.0.0.1/32", "127.0.0.1", true), ("127.0.0.1/32", "127.0.0.2", false),
        ("127.0.0.0/8", "127.255.1.2", true), ("10.42.0.0/16", "10.42.200.1", true),
        ("10.42.0.0/16", "10.43.0.1", false), ("169.254.0.0/16", "169.254.169.254", true),
        ("0.0.0.0/0", "203.0.113.9", true), ("0.0.0.0/0", "::1", false),
        ("::1/128", "::1", true), ("::1/128", "::2", false), ("fe80::/10", "fe80::1", true),
        ("fe80::/10", "febf::1", true), ("fe80::/10", "fec0::1", false), ("::/0", "10.0.0.1", true),
        ("192.168.1.7", "192.168.1.7", true), ("192.168.1.7", "192.168.1.8", false),
        // An IPv4 client seen as IPv4-mapped IPv6 matches IPv4 rules.
        ("10.0.0.0/8", "::ffff:10.1.2.3", true),
    ])
    func contains(block: String, address: String, expected: Bool) throws {
        let b = try #require(AddressBlock.parse(block))
        let a = try #require(IPAddress.parse(address))
        #expect(b.contains(a) == expected)
    }

    @Test(arguments: [
        "", "10.0.0.0/33", "::/129", "10.0.0/8", "host.example/8", "10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/8/8",
        "[::1]/128",
    ])
    func rejectsInvalid(text: String) {
        #expect(AddressBlock.parse(text) == nil)
    }

    @Test func addressDescriptionRoundTrips() throws {
        for s in ["127.0.0.1", "::1", "fe80::1", "10.42.0.7"] {
            #expect(try #require(IPAddress.parse(s)).description == s)
        }
    }

    @Test func defaults() throws {
        #expect(AddressBlock.loopback.contains(try #require(IPAddress.parse("127.0.0.2"))))
        #expect(!AddressBlock.loopback.contains(try #require(IPAddress.parse("10.0.0.1"))))
        #expect(AddressBlock.defaultDenied.contains(try #require(IPAddress.parse("169.254.169.254"))))
        #expect(AddressBlock.defaultDenied.contains(try #require(IPAddress.parse("fe80::a"))))
    }
}
