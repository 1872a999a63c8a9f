import CAuthProxyShims
import COpenSSL
import Foundation
import Testing

@testable import AuthProxyCore

/// `type = "oauth2"` in proxy.conf: what is accepted, the defaults, and the refusals naming the key.
@Suite struct OAuth2ConfigTests {
    let loader = ConfigLoader(environment: ["KC_SECRET": "from-env"])

    func entry(_ body: String) -> String {
        "[[credential]]\nname = \"kc\"\ntype = \"oauth2\"\nmatch = [\"https://ogc.example.com/\"]\n" + body
    }

    @Test func keycloakClientCredentialsWithDefaults() throws {
        let c = try loader.parse(
            entry(
                "issuer = \"https://kc.example.com/realms/gis\"\nclient_id = \"proxy\"\nclient_secret = \"${KC_SECRET}\"\n"
            ))
        let o = try #require(c.credentials[0].oauth2)
        #expect(o.endpoint == .issuer("https://kc.example.com/realms/gis") && o.providerHost == "kc.example.com")
        #expect(o.clientSecret == "from-env" && o.authMethod == nil && o.grant == .clientCredentials)
        #expect(o.placement == .header && o.defaultLifetimeSeconds == 300 && o.rejection == [.invalidToken])
        #expect(c.credentials[0].isRefreshable && c.credentials[0].kind.typeName == "oauth2")
    }

    @Test func everyOptionalKey() throws {
        let c = try loader.parse(
            entry(
                """
                token_url = "https://login.example.com/tenant/oauth2/v2.0/token"
                client_id = "proxy"
                client_secret = "s"
                token_endpoint_auth_method = "client_secret_post"
                scope = "api://x/.default"
                audience = "aud"
                resource = "https://ogc.example.com/"
                token_placement = "query"
                default_lifetime_seconds = 600
                rejection = ["invalid_token", "401", "redirect_to_issuer", 403, "498"]
                grant = "refresh_token"
                refresh_token = "RT"
                prefetch = true
                """))
        let o = try #require(c.credentials[0].oauth2)
        #expect(o.authMethod == .clientSecretPost && o.placement == .query && o.defaultLifetimeSeconds == 600)
        #expect(o.rejection == [.invalidToken, .anyUnauthorized, .redirectToIssuer, .status(403), .status(498)])
        #expect(o.grant == .refreshToken && o.refreshToken == "RT" && o.scope == "api://x/.default")
        #expect(c.credentials[0].prefetch)
    }

    @Test func refusals() {
        let base = "client_id = \"p\"\nclient_secret = \"s\"\n"
        expectRejected(loader, entry(base), key: "credential[0]", line: 1, fragment: "exactly one of issuer")
        expectRejected(
            loader, entry(base + "issuer = \"https://a\"\ntoken_url = \"https://a/t\"\n"), key: "credential[0]",
            line: 1,
            fragment: "exactly one of issuer")
        expectRejected(
            loader, entry("token_url = \"https://a/t\"\n"), key: "credential[0].client_id", line: 1,
            fragment: "needs client_id")
        expectRejected(
            loader, entry("token_url = \"https://a/t\"\nclient_id = \"p\"\n"), key: "credential[0].client_secret",
            line: 1,
            fragment: "needs client_secret, private_key")
        expectRejected(
            loader, entry(base + "token_url = \"https://a/t\"\ngrant = \"authorization_code\"\n"),
            key: "credential[0].redirect_uri",
            line: 1, fragment: "needs redirect_uri")
        expectRejected(
            loader,
            entry(
                base
                    + "token_url = \"https://a/t\"\ngrant = \"authorization_code\"\nredirect_uri = \"http://127.0.0.1:7/cb\"\n"
            ),
            key: "credential[0].authorization_url", line: 1, fragment: "needs authorization_url")
        expectRejected(
            loader, entry(base + "token_url = \"https://a/t\"\ngrant = \"device_code\"\n"), key: "credential[0].grant",
            line: 8, fragment: "is not one of")
        expectRejected(
            loader, entry(base + "token_url = \"https://a/t\"\ngrant = \"refresh_token\"\n"),
            key: "credential[0].refresh_token",
            line: 1, fragment: "needs refresh_token")
        expectRejected(
            loader, entry(base + "token_url = \"https://a/t\"\nrejection = [\"sometimes\"]\n"),
            key: "credential[0].rejection",
            line: 8, fragment: "each entry is")
        expectRejected(
            loader, entry(base + "token_url = \"https://a/t\"\nrejection = [200]\n"), key: "credential[0].rejection",
            line: 8, fragment: "300 to 599")
        expectRejected(
            loader, entry(base + "token_url = \"https://a/t\"\ntoken_placement = \"form\"\n"),
            key: "credential[0].token_placement",
            line: 8, fragment: "\"header\", \"query\"")
        expectRejected(
            loader, entry(base + "token_url = \"https://a/t\"\nprivate_key = \"/nonexistent/key.pem\"\n"),
            key: "credential[0].private_key", line: 8, fragment: "cannot read")
        expectRejected(
            loader, entry(base + "token_url = \"https://a/t\"\nkid = \"k\"\n"), key: "credential[0].private_key",
            line: 1,
            fragment: "describe a private_key")
        expectRejected(
            loader,
            entry(
                "token_url = \"https://a/t\"\nclient_id = \"p\"\ntoken_endpoint_auth_method = \"client_secret_basic\"\n"
            ),
            key: "credential[0].client_secret", line: 1, fragment: "needs client_secret")
    }

    @Test func aPrivateKeyIsCheckedAgainstItsAlgorithm() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("oauth2cfg-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let ec = try #require(ap_ec_p256_keygen_for_tests())
        let path = dir.appendingPathComponent("k.pem").path
        try Data(ec).write(to: URL(fileURLWithPath: path))
        _ = try loader.parse(
            entry(
                "token_url = \"https://a/t\"\nclient_id = \"p\"\nprivate_key = \"\(path)\"\nprivate_key_alg = \"ES256\"\nkid = \"k\"\n"
            ))
        expectRejected(
            loader, entry("token_url = \"https://a/t\"\nclient_id = \"p\"\nprivate_key = \"\(path)\"\n"),
            key: "credential[0].private_key", line: 7, fragment: "not an RSA key")
    }

    /// A fresh EC P-256 key as PEM.
    func ap_ec_p256_keygen_for_tests() -> [UInt8]? {
        guard let k = ap_ec_p256_keygen() else { return nil }
        defer { EVP_PKEY_free(k) }
        return ClientAssertionJWTTests.pem(k)
    }
}
