import Foundation
import Testing

@testable import AuthProxyCore

@Suite struct DigestAuthorizationTests {
    private static let rfc7616 =
        #"Digest realm="http-auth@example.org", qop="auth, auth-int", algorithm=SHA-256, "#
        + #"nonce="7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v", opaque="FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS""#
    private static let cnonce7616 = "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ"

    private func challenge(_ value: String) throws -> DigestChallenge {
        let c = try #require(AuthChallenge.parse(value).first)
        return try DigestChallenge(c)
    }

    private func response(_ value: String) -> String? {
        guard let r = value.range(of: #"response=""#) else { return nil }
        return String(value[r.upperBound...].prefix { $0 != "\"" })
    }

    @Test func rfc7616SHA256Example() throws {
        let c = try challenge(Self.rfc7616)
        #expect(c.algorithm == .sha256 && c.qop == ["auth", "auth-int"] && !c.stale)
        let qop = try c.chooseQop(hasBody: false)
        #expect(qop == .auth)
        let v = DigestAuthorization.value(
            challenge: c, qop: qop, username: "Mufasa", password: "Circle of Life", method: "GET",
            uri: "/dir/index.html", nc: 1, cnonce: Self.cnonce7616)
        #expect(response(v) == "753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1")
        #expect(v.contains(#"username="Mufasa""#) && v.contains("nc=00000001") && v.contains("qop=auth,"))
        #expect(v.contains(#"opaque="FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS""#))
        #expect(v.contains("algorithm=SHA-256"))
    }

    @Test func rfc7616MD5Example() throws {
        let c = try challenge(Self.rfc7616.replacingAll("algorithm=SHA-256", with: "algorithm=MD5"))
        let v = DigestAuthorization.value(
            challenge: c, qop: .auth, username: "Mufasa", password: "Circle of Life", method: "GET",
            uri: "/dir/index.html", nc: 1, cnonce: Self.cnonce7616)
        #expect(response(v) == "8ca523f5e9506fed4657c9700eebdbec")
    }

    @Test func rfc2617Example() throws {
        let c = try challenge(
            #"Digest realm="testrealm@host.com", qop="auth,auth-int", nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093", "#
                + #"opaque="5ccc069c403ebaf9f0171e9517f40e41""#)
        #expect(c.algorithm == .md5)
        let v = DigestAuthorization.value(
            challenge: c, qop: .auth, username: "Mufasa", password: "Circle Of Life", method: "GET",
            uri: "/dir/index.html", nc: 1, cnonce: "0a4f113b")
        #expect(response(v) == "6629fae49393a05397450978507c4ef1")
    }

    @Test func rfc2069WithoutQop() throws {
        // RFC 2069 §2.4's example: response = MD5(MD5(A1):nonce:MD5(A2)).
        let c = try challenge(
            #"Digest realm="testrealm@host.com", nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093", "#
                + #"opaque="5ccc069c403ebaf9f0171e9517f40e41""#)
        #expect(try c.chooseQop(hasBody: false) == DigestQop.none)
        let v = DigestAuthorization.value(
            challenge: c, qop: .none, username: "Mufasa", password: "CircleOfLife", method: "GET",
            uri: "/dir/index.html", nc: 1, cnonce: "x")
        #expect(response(v) == "1949323746fe6a43ef61f9606e7febea")
        #expect(!v.contains("nc=") && !v.contains("cnonce="))
    }

    @Test func sessionAlgorithmFoldsNonceAndCnonce() throws {
        let c = try challenge(#"Digest realm="r", nonce="n", qop="auth", algorithm=MD5-sess"#)
        let plain = try challenge(#"Digest realm="r", nonce="n", qop="auth", algorithm=MD5"#)
        let args = (username: "u", password: "p", method: "GET", uri: "/", nc: UInt32(1), cnonce: "c")
        let a = DigestAuthorization.value(
            challenge: c, qop: .auth, username: args.username, password: args.password, method: args.method,
            uri: args.uri, nc: args.nc, cnonce: args.cnonce)
        let b = DigestAuthorization.value(
            challenge: plain, qop: .auth, username: args.username, password: args.password, method: args.method,
            uri: args.uri, nc: args.nc, cnonce: args.cnonce)
        // H(A1) = MD5(MD5(u:r:p):n:c), then the same KD as MD5.
        let ha1 = DigestAlgorithm.md5.hash("\(DigestAlgorithm.md5.hash("u:r:p")):n:c")
        let expected = DigestAlgorithm.md5.hash("\(ha1):n:00000001:c:auth:\(DigestAlgorithm.md5.hash("GET:/"))")
        #expect(response(a) == expected && response(a) != response(b))
    }

    @Test func ncIsEightHexDigits() {
        #expect(DigestAuthorization.ncString(1) == "00000001")
        #expect(DigestAuthorization.ncString(0x1f) == "0000001f")
        #expect(DigestAuthorization.ncString(UInt32.max) == "ffffffff")
    }

    @Test func cnoncesAreRandom() {
        let a = DigestAuthorization.newCnonce()
        let b = DigestAuthorization.newCnonce()
        #expect(a.count == 32 && a != b)
    }

    @Test func quotesAndNonASCIIUsers() throws {
        let c = try challenge(#"Digest realm="r", nonce="n", qop="auth", charset=UTF-8"#)
        let v = DigestAuthorization.value(
            challenge: c, qop: .auth, username: "J\u{E4}s\u{F8}n Doe", password: "p", method: "GET", uri: "/",
            nc: 1, cnonce: "c")
        #expect(v.contains("username*=UTF-8''J%C3%A4s%C3%B8n%20Doe"))
        let q = DigestAuthorization.value(
            challenge: c, qop: .auth, username: #"a"b\c"#, password: "p", method: "GET", uri: "/", nc: 1, cnonce: "c")
        #expect(q.contains(#"username="a\"b\\c""#))
        // No control byte of a configured user name reaches the head, with or without the server's charset.
        let plain = try challenge(#"Digest realm="r", nonce="n", qop="auth""#)
        let evil = DigestAuthorization.value(
            challenge: plain, qop: .auth, username: "u\r\nX-Injected: 1\u{0}", password: "p", method: "GET", uri: "/",
            nc: 1, cnonce: "c")
        #expect(!evil.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }))
        #expect(evil.contains("username*=UTF-8''u%0D%0AX-Injected%3A%201%00"))
    }
}

extension String {
    fileprivate func replacingAll(_ a: String, with b: String) -> String {
        guard let r = range(of: a) else { return self }
        return replacingCharacters(in: r, with: b)
    }
}
