import Testing

@testable import AuthProxyCore

@Suite struct ProxyAuthenticatorTests {
    let auth = ProxyAuthenticator([
        ProxyClient(name: "alice", password: "s3cret:with:colons", credentials: nil),
        ProxyClient(name: "bob", password: "hunter2", credentials: ["team-b"]),
    ])

    func basic(_ s: String) -> String { "Basic " + base64(Array(s.utf8)) }

    @Test func acceptsRightPasswords() throws {
        #expect(auth.authenticate(basic("alice:s3cret:with:colons"))?.name == "alice")
        #expect(auth.authenticate(basic("bob:hunter2"))?.credentials == ["team-b"])
        #expect(auth.authenticate("basic   " + base64(Array("bob:hunter2".utf8)))?.name == "bob")
    }

    @Test(arguments: [nil, "", "Basic", "Basic !!!", "Bearer abc", "Basic Ym9i"])
    func rejectsMalformed(header: String?) {
        #expect(auth.authenticate(header) == nil)
    }

    @Test func nonASCIIPasswordsVerifyAsUTF8AndAsISO88591() {
        let a = ProxyAuthenticator([ProxyClient(name: "jürgen", password: "pässwörd", credentials: nil)])
        // curl and browsers: UTF-8.
        #expect(a.authenticate("Basic " + base64(Array("jürgen:pässwörd".utf8)))?.name == "jürgen")
        // Python requests/urllib3: ISO-8859-1 (ä = E4, ö = F6, ü = FC).
        let latin1: [UInt8] = [
            0x6A, 0xFC, 0x72, 0x67, 0x65, 0x6E, 0x3A, 0x70, 0xE4, 0x73, 0x73, 0x77, 0xF6, 0x72, 0x64,
        ]
        #expect(a.authenticate("Basic " + base64(latin1))?.name == "jürgen")
        // Still the password that counts.
        let wrong: [UInt8] = [0x6A, 0xFC, 0x72, 0x67, 0x65, 0x6E, 0x3A, 0x70, 0xE4, 0x73, 0x73]
        #expect(a.authenticate("Basic " + base64(wrong)) == nil)
        #expect(ProxyAuthenticator.utf8(Array("plain".utf8)) == Array("plain".utf8))
    }

    @Test func rejectsWrongPasswordAndUnknownUser() {
        #expect(auth.authenticate(basic("bob:hunter3")) == nil)
        #expect(auth.authenticate(basic("bob:")) == nil)
        #expect(auth.authenticate(basic("carol:hunter2")) == nil)
        #expect(auth.authenticate(basic("alice:hunter2")) == nil)
    }

    @Test func keepsNoPassword() {
        let c = ProxyClient(name: "x", password: "visible-password", credentials: nil)
        #expect(!String(describing: c).contains("visible-password"))
        #expect(c.verify(password: Array("visible-password".utf8)))
        // Salted: the same password hashes differently for two clients.
        #expect(c.digest != ProxyClient(name: "y", password: "visible-password", credentials: nil).digest)
    }

    @Test func base64Decoding() {
        #expect(Base64.decode("YWxpY2U6cHc=") == Array("alice:pw".utf8))
        #expect(Base64.decode("YQ") == Array("a".utf8))
        #expect(Base64.decode("YQ==x") == nil)
        #expect(Base64.decode("Y Q==") == nil)
    }

    private func base64(_ b: [UInt8]) -> String {
        let t = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        var out: [UInt8] = []
        var i = 0
        while i < b.count {
            let n = min(3, b.count - i)
            var v = 0
            for k in 0..<3 { v = v << 8 | (k < n ? Int(b[i + k]) : 0) }
            for k in 0..<4 { out.append(k <= n ? t[(v >> (18 - 6 * k)) & 63] : UInt8(ascii: "=")) }
            i += 3
        }
        return String(decoding: out, as: UTF8.self)
    }
}
