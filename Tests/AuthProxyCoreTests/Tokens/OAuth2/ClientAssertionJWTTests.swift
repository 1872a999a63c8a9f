import CAuthProxyShims
import COpenSSL
import Foundation
import Testing

@testable import AuthProxyCore

/// The pure parts of a `private_key_jwt` assertion, and signatures made with OpenSSL checked with OpenSSL's verify.
@Suite struct ClientAssertionJWTTests {
    @Test func base64URLRoundTripsWithoutPadding() {
        for n in 0..<40 {
            let bytes = (0..<n).map { UInt8(($0 * 37 + 251) & 0xFF) }
            let s = Base64URL.encode(bytes)
            #expect(!s.contains("=") && !s.contains("+") && !s.contains("/"))
            #expect(Base64URL.decode(s) == bytes)
        }
        #expect(Base64URL.encode(Array("{\"a\":1}".utf8)) == "eyJhIjoxfQ")
        #expect(Base64URL.decode("eyJhIjoxfQ==") == Array("{\"a\":1}".utf8))
        #expect(Base64URL.decode("not base64!") == nil)
    }

    @Test func headerCarriesKidOrTheCertificateThumbprint() throws {
        let h1 = ClientAssertionJWT.header(alg: .rs256, kid: "k1", x5tS256: nil)
        #expect(h1 == #"{"alg":"RS256","typ":"JWT","kid":"k1"}"#)
        let h2 = ClientAssertionJWT.header(alg: .es256, kid: nil, x5tS256: "abc_-")
        #expect(h2 == #"{"alg":"ES256","typ":"JWT","x5t#S256":"abc_-"}"#)
        let parsed = try JSONSerialization.jsonObject(with: Data(h2.utf8)) as! [String: Any]
        #expect(parsed["x5t#S256"] as? String == "abc_-")
    }

    @Test func claimsNameTheClientAndTheTokenEndpoint() throws {
        let c = ClientAssertionJWT.claims(
            clientID: "app \"1\"", audience: "https://idp/token", jti: "J", issuedAt: 1_000)
        let parsed = try JSONSerialization.jsonObject(with: Data(c.utf8)) as! [String: Any]
        #expect(parsed["iss"] as? String == "app \"1\"" && parsed["sub"] as? String == "app \"1\"")
        #expect(parsed["aud"] as? String == "https://idp/token" && parsed["jti"] as? String == "J")
        #expect((parsed["iat"] as? NSNumber)?.intValue == 1_000 && (parsed["exp"] as? NSNumber)?.intValue == 1_300)
        #expect(ClientAssertionJWT.signingInput(header: "{}", claims: "{}") == "e30.e30")
    }

    @Test func ecdsaDERBecomesFixedSizeRawRS() {
        // r with a sign byte (33 bytes), s short (31 bytes): both come out as 32.
        let r = [UInt8(0x00), 0x80] + [UInt8](repeating: 0x11, count: 31)
        let s = [UInt8](repeating: 0x22, count: 31)
        let der: [UInt8] =
            [0x30, UInt8(2 + r.count + 2 + s.count), 0x02, UInt8(r.count)] + r + [0x02, UInt8(s.count)] + s
        let raw = ClientAssertionJWT.rawECDSASignature(der: der)
        #expect(raw == Array(r.dropFirst()) + [0] + s)
        #expect(raw?.count == 64)
        // Not a sequence of two integers, trailing bytes, an integer too long: refused.
        #expect(ClientAssertionJWT.rawECDSASignature(der: [0x31, 0x00]) == nil)
        #expect(ClientAssertionJWT.rawECDSASignature(der: der + [0]) == nil)
        let long = [UInt8](repeating: 0x7F, count: 33)
        #expect(ClientAssertionJWT.rawECDSASignature(der: [0x30, 38, 0x02, 33] + long + [0x02, 1, 1]) == nil)
    }

    /// raw r||s → DER, for OpenSSL's verify.
    static func der(raw: [UInt8]) -> [UInt8] {
        func integer(_ v: ArraySlice<UInt8>) -> [UInt8] {
            var b = Array(v.drop { $0 == 0 })
            if b.isEmpty { b = [0] }
            if b[0] & 0x80 != 0 { b.insert(0, at: 0) }
            return [0x02, UInt8(b.count)] + b
        }
        let body = integer(raw[0..<32]) + integer(raw[32..<64])
        return [0x30, UInt8(body.count)] + body
    }

    static func verify(_ key: OpaquePointer, pss: Bool, _ input: String, _ signature: [UInt8]) -> Bool {
        let data = Array(input.utf8)
        return ap_verify_sha256(key, pss ? 1 : 0, data, data.count, signature, signature.count) == 1
    }

    @Test(arguments: [OAuth2Settings.KeyAlgorithm.rs256, .ps256, .es256])
    func signaturesVerifyWithOpenSSL(_ alg: OAuth2Settings.KeyAlgorithm) throws {
        let raw = alg == .es256 ? ap_ec_p256_keygen() : ap_rsa_keygen(2048)
        let key = try #require(raw)
        EVP_PKEY_up_ref(key)  // one reference for the signer, one for the check below
        defer { EVP_PKEY_free(key) }
        let signer = JWTSigningKey(owning: key, algorithm: alg)
        let jwt = try #require(
            signer.assertion(clientID: "c", audience: "https://idp/token", kid: "k", x5tS256: nil, now: 1_700_000_000))
        let parts = jwt.split(separator: ".").map(String.init)
        #expect(parts.count == 3)
        let signature = try #require(Base64URL.decode(parts[2]))
        let input = parts[0] + "." + parts[1]
        switch alg {
        case .es256:
            #expect(signature.count == 64)
            #expect(Self.verify(key, pss: false, input, Self.der(raw: signature)))
            #expect(!Self.verify(key, pss: false, input + "x", Self.der(raw: signature)))
        case .rs256:
            #expect(Self.verify(key, pss: false, input, signature))
            #expect(!Self.verify(key, pss: true, input, signature))
        case .ps256:
            #expect(Self.verify(key, pss: true, input, signature))
            #expect(!Self.verify(key, pss: false, input, signature))
        }
        let header =
            try JSONSerialization.jsonObject(with: Data(try #require(Base64URL.decode(parts[0])))) as! [String: Any]
        #expect(header["alg"] as? String == alg.rawValue)
    }

    @Test func aKeyOfTheWrongTypeIsRefusedNamingTheFile() throws {
        let ec = try #require(ap_ec_p256_keygen())
        defer { EVP_PKEY_free(ec) }
        let pem = try #require(Self.pem(ec))
        #expect(throws: OAuth2Problem("'k.pem' is not an RSA key of at least 2048 bits, which RS256 needs")) {
            try JWTSigningKey(pem: pem, algorithm: .rs256, source: "'k.pem'")
        }
        _ = try JWTSigningKey(pem: pem, algorithm: .es256, source: "'k.pem'")
        #expect(throws: OAuth2Problem("'x' holds no unencrypted PEM private key")) {
            try JWTSigningKey(pem: Array("nope".utf8), algorithm: .es256, source: "'x'")
        }
    }

    static func pem(_ key: OpaquePointer) -> [UInt8]? {
        guard let bio = BIO_new(BIO_s_mem()) else { return nil }
        defer { BIO_free(bio) }
        guard PEM_write_bio_PrivateKey(bio, key, nil, nil, 0, nil, nil) == 1 else { return nil }
        var out = [UInt8](repeating: 0, count: Int(ap_bio_pending(bio)))
        let n = BIO_read(bio, &out, Int32(out.count))
        return n > 0 ? Array(out[0..<Int(n)]) : nil
    }
}
