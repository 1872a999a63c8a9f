import Testing

@testable import AuthProxyCore

/// Which token services a server's `rest/info` may send the password to: its own origin (scheme, host and port,
/// default ports filled in), or one the credential is configured for, never http for an https server.
@Suite struct TokenServiceTrustTests {
    typealias Origin = TokenServiceTrust.Origin

    static func trusted(_ service: String, _ root: String, _ configured: Set<Origin> = []) -> Bool {
        (try? TokenServiceTrust.check(tokenService: service, root: root, configured: configured).get()) != nil
    }

    @Test func theServersOwnOriginIsTrustedWithDefaultPortsNormalised() {
        #expect(Self.trusted("https://gis.example.com/arcgis/tokens/generateToken", "https://gis.example.com/arcgis"))
        #expect(Self.trusted("https://GIS.example.com:443/arcgis/tokens/", "https://gis.example.com/arcgis"))
        #expect(Self.trusted("http://gis.example.com/arcgis/tokens/", "http://gis.example.com:80/arcgis"))
        #expect(Self.trusted("http://127.0.0.1:32901/arcgis/tokens/", "http://127.0.0.1:32901/arcgis"))
        #expect(Self.trusted("https://[::1]:8443/portal/sharing/rest/generateToken", "https://[::1]:8443/arcgis"))
    }

    /// The finding: the same host on another port is another origin (whoever opens a port there).
    @Test func anotherPortOfTheSameHostIsNotTrusted() {
        #expect(!Self.trusted("http://127.0.0.1:37767/arcgis/tokens/generateToken", "http://127.0.0.1:32901/arcgis"))
        #expect(
            !Self.trusted(
                "https://gis.example.com:7443/portal/sharing/rest/generateToken", "https://gis.example.com/arcgis"))
        #expect(!Self.trusted("https://gis.example.com/arcgis/tokens/", "https://gis.example.com:6443/arcgis"))
        // http → https of the same host on other ports is another listener.
        #expect(!Self.trusted("https://gis.example.com/arcgis/tokens/", "http://gis.example.com:8080/arcgis"))
        #expect(!Self.trusted("https://gis.example.com:8443/arcgis/tokens/", "http://gis.example.com/arcgis"))
    }

    @Test func theHTTPSFormOfAnHTTPServerOnItsDefaultPortsIsTrusted() {
        // Both privileged ports of one host: ArcGIS names its https token service for a site that also answers http.
        #expect(Self.trusted("https://gis.example.com/arcgis/tokens/", "http://gis.example.com/arcgis"))
        #expect(Self.trusted("https://gis.example.com:443/arcgis/tokens/", "http://gis.example.com:80/arcgis"))
        #expect(!Self.trusted("https://other.example.com/arcgis/tokens/", "http://gis.example.com/arcgis"))
    }

    @Test func anotherHostOrADowngradeOrNoURLIsNotTrusted() {
        #expect(!Self.trusted("https://evil.example.com/arcgis/tokens/", "https://gis.example.com/arcgis"))
        #expect(!Self.trusted("http://gis.example.com:443/arcgis/tokens/", "https://gis.example.com/arcgis"))
        #expect(!Self.trusted("ftp://gis.example.com/tokens", "https://gis.example.com/arcgis"))
        #expect(!Self.trusted("/arcgis/tokens/", "https://gis.example.com/arcgis"))
        #expect(!Self.trusted("", "https://gis.example.com/arcgis"))
    }

    @Test func aConfiguredOriginIsTrustedButNeverOverHTTPForAnHTTPSServer() {
        let portal = Origin(scheme: "https", host: "gis.example.com", port: 7443)
        #expect(
            Self.trusted(
                "https://gis.example.com:7443/portal/sharing/rest/generateToken", "https://gis.example.com/arcgis",
                [portal]))
        let plain = Origin(scheme: "http", host: "gis.example.com", port: 7080)
        #expect(
            !Self.trusted(
                "http://gis.example.com:7080/portal/sharing/rest/generateToken", "https://gis.example.com/arcgis",
                [plain]))
    }

    @Test func theReasonNamesBothOrigins() throws {
        let r = TokenServiceTrust.check(
            tokenService: "http://127.0.0.1:37767/arcgis/tokens/generateToken", root: "http://127.0.0.1:32901/arcgis",
            configured: [])
        guard case .failure(let d) = r else {
            Issue.record("trusted")
            return
        }
        #expect(
            d.reason.contains("http://127.0.0.1:37767") && d.reason.contains("http://127.0.0.1:32901"), "\(d.reason)")
    }

    @Test func configuredOriginsAreTheNonWildcardMatchPrefixesAndTheirUpgrades() throws {
        let c = try TokenTestSupport.credential(
            """
            [[credential]]
            name = "gis"
            type = "arcgis-token"
            username = "u"
            password = "p"
            match = ["http://gis.example.com/arcgis", "http://gis.example.com:7080/portal", "https://*.example.org"]
            upgrade_to_https = true
            """)
        #expect(
            TokenServiceTrust.configuredOrigins(c) == [
                Origin(scheme: "http", host: "gis.example.com", port: 80),
                Origin(scheme: "https", host: "gis.example.com", port: 443),
                Origin(scheme: "http", host: "gis.example.com", port: 7080),
                Origin(scheme: "https", host: "gis.example.com", port: 7080),
            ])
    }
}
