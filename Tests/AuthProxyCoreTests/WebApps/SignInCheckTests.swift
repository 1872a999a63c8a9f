import CAuthProxyShims
import COpenSSL
import Foundation
import Testing

@testable import AuthProxyCore

/// JWT sign-in on `/proxy` without sockets: tokens signed by real keys (OpenSSL), checked against a policy at a
/// fixed time.
@Suite struct SignInCheckTests {
    static let now: Int64 = 1_800_000_000
    static let policy = SignInPolicy(
        issuer: "https://idp.example.com/realms/gis", audiences: ["parcels-app"], clockSkewSeconds: 60,
        rules: [
            UserRule(claim: "groups", value: "editors", credentials: ["editing"]),
            UserRule(claim: "realm_access.roles", value: "viewer", credentials: ["viewing"]),
        ])

    /// A key pair: the signer and the JWK of its public half (as an issuer's JWKS publishes it).
    struct Pair {
        let signer: JWTSigningKey
        let jwk: JWK
    }

    static func pair(_ alg: OAuth2Settings.KeyAlgorithm, kid: String?) throws -> Pair {
        let key = try #require(alg == .es256 ? ap_ec_p256_keygen() : ap_rsa_keygen(2048))
        let material: JWK.Material
        if alg == .es256 {
            var pub = [UInt8](repeating: 0, count: 65)
            var len = 0
            #expect(EVP_PKEY_get_octet_string_param(key, "pub", &pub, 65, &len) == 1 && len == 65)
            material = .p256(x: Array(pub[1..<33]), y: Array(pub[33..<65]))
        } else {
            func bn(_ name: String) -> [UInt8] {
                var b: OpaquePointer? = nil
                _ = EVP_PKEY_get_bn_param(key, name, &b)
                defer { BN_free(b) }
                var out = [UInt8](repeating: 0, count: Int((BN_num_bits(b) + 7) / 8))
                _ = BN_bn2bin(b, &out)
                return out
            }
            material = .rsa(n: bn("n"), e: bn("e"))
        }
        return Pair(
            signer: JWTSigningKey(owning: key, algorithm: alg), jwk: JWK(kid: kid, alg: nil, material: material))
    }

    static func token(_ p: Pair, kid: String?, alg: String? = nil, claims: [String: Any]) throws -> String {
        var header: [String: Any] = ["alg": alg ?? p.signer.algorithm.rawValue, "typ": "JWT"]
        if let kid { header["kid"] = kid }
        func json(_ o: [String: Any]) throws -> String {
            String(decoding: try JSONSerialization.data(withJSONObject: o, options: [.sortedKeys]), as: UTF8.self)
        }
        return try #require(p.signer.signed(header: try json(header), claims: try json(claims)))
    }

    static func claims(_ extra: [String: Any] = [:]) -> [String: Any] {
        var c: [String: Any] = [
            "iss": "https://idp.example.com/realms/gis", "aud": "parcels-app", "sub": "u1", "iat": now - 10,
            "exp": now + 300,
        ]
        for (k, v) in extra { c[k] = v }
        return c
    }

    static func verdict(
        _ token: String?, keys: [JWSVerifier]?, afterFetch: Bool = false, scheme: String = "Bearer"
    ) -> SignInVerdict {
        SignInCheck.verdict(
            authorization: token.map { "\(scheme) \($0)" }, policy: policy, keys: keys, afterFetch: afterFetch,
            now: now)
    }

    @Test(arguments: [OAuth2Settings.KeyAlgorithm.rs256, .ps256, .es256])
    func aValidTokenIsAdmittedAndRulesPickCredentials(_ alg: OAuth2Settings.KeyAlgorithm) throws {
        let p = try Self.pair(alg, kid: "k1")
        let keys = [try #require(JWSVerifier(p.jwk))]
        #expect(Self.verdict(try Self.token(p, kid: "k1", claims: Self.claims()), keys: keys) == .admitted(rule: nil))
        let editor = try Self.token(p, kid: "k1", claims: Self.claims(["groups": ["staff", "editors"]]))
        #expect(Self.verdict(editor, keys: keys) == .admitted(rule: 0))
        let viewer = try Self.token(p, kid: "k1", claims: Self.claims(["realm_access": ["roles": ["viewer"]]]))
        #expect(Self.verdict(viewer, keys: keys) == .admitted(rule: 1))
        // Both match: the first rule wins.
        let both = try Self.token(
            p, kid: "k1", claims: Self.claims(["groups": "editors", "realm_access": ["roles": ["viewer"]]]))
        #expect(Self.verdict(both, keys: keys) == .admitted(rule: 0))
        // A token without kid is checked against every key fitting its algorithm.
        #expect(Self.verdict(try Self.token(p, kid: nil, claims: Self.claims()), keys: keys) == .admitted(rule: nil))
    }

    @Test func tamperedOrForeignSignaturesAreRefused() throws {
        let p = try Self.pair(.rs256, kid: "k1")
        let other = try Self.pair(.rs256, kid: "k1")
        let keys = [try #require(JWSVerifier(p.jwk))]
        let good = try Self.token(p, kid: "k1", claims: Self.claims())
        let parts = good.split(separator: ".").map(String.init)
        let forged = Base64URL.encode(
            try JSONSerialization.data(withJSONObject: Self.claims(["groups": "editors"]), options: []))
        let tampered = parts[0] + "." + forged + "." + parts[2]
        #expect(Self.verdict(tampered, keys: keys) == .refused("the token's signature does not verify"))
        let foreign = try Self.token(other, kid: "k1", claims: Self.claims())
        #expect(Self.verdict(foreign, keys: keys) == .refused("the token's signature does not verify"))
        // An RS256 token relabelled ES256 or HS256 does not verify with the RSA key (algorithm confusion).
        let es = try Self.token(p, kid: "k1", alg: "ES256", claims: Self.claims())
        #expect(Self.verdict(es, keys: keys) != .admitted(rule: nil))
        let hs = try Self.token(p, kid: "k1", alg: "HS256", claims: Self.claims())
        #expect(
            Self.verdict(hs, keys: keys)
                == .refused("the token's algorithm is not accepted (RS256, PS256 or ES256 only)"))
        let none = parts[0].isEmpty ? "" : Base64URL.encode("{\"alg\":\"none\"}") + "." + parts[1] + "."
        #expect(Self.verdict(none, keys: keys) != .admitted(rule: nil))
    }

    @Test func claimsAreCheckedWithClockSkew() throws {
        let p = try Self.pair(.rs256, kid: "k1")
        let keys = [try #require(JWSVerifier(p.jwk))]
        func v(_ extra: [String: Any]) throws -> SignInVerdict {
            Self.verdict(try Self.token(p, kid: "k1", claims: Self.claims(extra)), keys: keys)
        }
        #expect(try v(["exp": Self.now - 61]) == .refused("the token expired"))
        #expect(try v(["exp": Self.now - 59]) == .admitted(rule: nil))  // within the skew
        #expect(try v(["nbf": Self.now + 120]) == .refused("the token is not valid yet (nbf)"))
        #expect(try v(["nbf": Self.now + 30]) == .admitted(rule: nil))
        #expect(try v(["iss": "https://evil.example.com/realms/gis"]) == .refused("the token is from another issuer"))
        #expect(try v(["aud": "other-app"]) == .refused("the token is for another audience"))
        #expect(try v(["aud": ["other-app", "parcels-app"]]) == .admitted(rule: nil))
        #expect(try v(["exp": "soon"]) == .refused("the token has no expiry (exp)"))
        #expect(try v(["exp": Double(Self.now) + 10.5]) == .admitted(rule: nil))
    }

    @Test func unknownKidAsksForKeysOnceThenRefuses() throws {
        let p = try Self.pair(.rs256, kid: "new")
        let old = try Self.pair(.rs256, kid: "old")
        let keys = [try #require(JWSVerifier(old.jwk))]
        let t = try Self.token(p, kid: "new", claims: Self.claims())
        #expect(Self.verdict(t, keys: nil) == .needKeys)
        #expect(Self.verdict(t, keys: keys) == .needKeys)
        #expect(
            Self.verdict(t, keys: keys, afterFetch: true)
                == .refused("no signing key of the issuer has the token's kid"))
        // An expired or foreign token never asks for keys.
        let expired = try Self.token(p, kid: "new", claims: Self.claims(["exp": Self.now - 3600]))
        #expect(Self.verdict(expired, keys: nil) == .refused("the token expired"))
    }

    @Test func missingAndMalformed() throws {
        #expect(Self.verdict(nil, keys: nil) == .missing)
        #expect(Self.verdict("", keys: nil) == .missing)
        #expect(
            Self.verdict("dXNlcjpwdw==", keys: nil, scheme: "Basic")
                == .refused("send the user's token as Authorization: Bearer <token>"))
        #expect(Self.verdict("abc", keys: nil) == .refused("the token is not a JWT (expected header.claims.signature)"))
        #expect(
            Self.verdict("a.b.c.d.e", keys: nil)
                == .refused("the token is encrypted (JWE): send the ID token or a signed access token"))
        #expect(Self.verdict("e30.e30.", keys: nil) == .refused("the token's header has no alg"))
        #expect(Self.verdict("!!.e30.", keys: nil) == .refused("the token is not base64url"))
    }

    @Test func challengeFollowsRFC6750() {
        #expect(SignInCheck.challenge(.missing) == "Bearer realm=\"authproxy\"")
        #expect(
            SignInCheck.challenge(.refused("the token expired \"now\"\\"))
                == "Bearer realm=\"authproxy\", error=\"invalid_token\", error_description=\"the token expired now\"")
    }

    @Test func jwksReadingSkipsWhatCannotVerify() throws {
        let p = try Self.pair(.rs256, kid: "r")
        guard case .rsa(let n, let e) = p.jwk.material else { throw CancellationError() }
        let doc: [String: Any] = [
            "keys": [
                [
                    "kty": "RSA", "kid": "r", "use": "sig", "alg": "RS256", "n": Base64URL.encode(n),
                    "e": Base64URL.encode(e),
                ],
                ["kty": "RSA", "kid": "enc", "use": "enc", "n": Base64URL.encode(n), "e": Base64URL.encode(e)],
                ["kty": "RSA", "kid": "small", "n": Base64URL.encode(Array(n.prefix(128))), "e": Base64URL.encode(e)],
                ["kty": "oct", "kid": "hmac", "k": "c2VjcmV0"],
                ["kty": "EC", "kid": "p384", "crv": "P-384", "x": "AA", "y": "AA"],
            ]
        ]
        let set = try #require(JWK.set(from: Array(try JSONSerialization.data(withJSONObject: doc))))
        #expect(set.map(\.kid) == ["r"])
        #expect(set[0].verifies("RS256") && !set[0].verifies("PS256") && !set[0].verifies("ES256"))
        #expect(JWK.set(from: Array("{\"nokeys\":1}".utf8)) == nil)
        let verifier = try #require(JWSVerifier(set[0]))
        let t = try Self.token(p, kid: "r", claims: Self.claims())
        #expect(Self.verdict(t, keys: [verifier]) == .admitted(rule: nil))
    }

    @Test func discoveryMustNameTheIssuer() {
        let issuer = "https://idp.example.com/realms/gis"
        func r(_ body: String, status: Int = 200) -> Result<String, OIDCDiscovery.Problem> {
            OIDCDiscovery.jwksURI(status: status, body: Array(body.utf8), issuer: issuer)
        }
        #expect(
            r("{\"issuer\":\"\(issuer)\",\"jwks_uri\":\"\(issuer)/certs\"}") == .success("\(issuer)/certs"))
        #expect(
            r("{\"issuer\":\"https://other\",\"jwks_uri\":\"\(issuer)/certs\"}")
                == .failure(.init(reason: "the document names another issuer than sign_in_issuer")))
        #expect(r("{\"issuer\":\"\(issuer)\"}") == .failure(.init(reason: "no http(s) jwks_uri")))
        #expect(r("nope", status: 404) == .failure(.init(reason: "HTTP 404")))
        #expect(
            SignInPolicy(issuer: issuer + "/", audiences: []).discoveryURL == issuer
                + "/.well-known/openid-configuration")
    }
}
