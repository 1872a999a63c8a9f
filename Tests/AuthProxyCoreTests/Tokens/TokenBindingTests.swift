import Testing

@testable import AuthProxyCore

/// How tokens are bound (issue 36, item 3): a stable synthetic referer unless `requestip` is asked for, the same
/// binding for federated server tokens, and `check`'s warning where an address binding breaks.
@Suite struct TokenBindingTests {
    let loader = ConfigLoader(environment: [:])

    func arcgis(_ extra: String = "", name: String = "gis") throws -> Credential {
        try loader.parse(
            """
            [[credential]]
            name = "\(name)"
            type = "arcgis-token"
            username = "u"
            password = "p"
            match = "https://gis.example.com/arcgis"
            \(extra)
            """
        ).credentials[0]
    }

    @Test func theSyntheticRefererComesFromTheNameAlone() {
        #expect(TokenBinding.syntheticReferer(credential: "gis") == "app://authproxy/gis")
        // Anything outside the URL's unreserved characters is percent-encoded: always a valid Referer value.
        #expect(TokenBinding.syntheticReferer(credential: "a b/ü") == "app://authproxy/a%20b%2F%C3%BC")
        #expect(TokenBinding.syntheticReferer(credential: "x") == TokenBinding.syntheticReferer(credential: "x"))
    }

    @Test func withoutARefererTokensAreBoundToTheSyntheticOne() throws {
        let c = try arcgis()
        #expect(TokenBinding.of(c) == .referer("app://authproxy/gis"))
        #expect(
            TokenBinding.of(c)?.exchangeFields.map { "\($0.0)=\($0.1)" } == [
                "client=referer", "referer=app://authproxy/gis",
            ])
    }

    @Test func aConfiguredRefererIsKept() throws {
        let c = try arcgis("referer = \"https://maps.example.com/app\"")
        #expect(TokenBinding.of(c) == .referer("https://maps.example.com/app"))
        guard let s = c.kind as? ArcGISTokenSettings else { return }
        #expect(!s.syntheticReferer)
    }

    @Test func requestipStaysAvailableAndBindsNothingToSend() throws {
        let c = try arcgis("client = \"requestip\"")
        #expect(TokenBinding.of(c) == .address(client: "requestip"))
        #expect(TokenBinding.of(c)?.referer == nil)
        #expect(TokenBinding.of(c)?.exchangeFields.isEmpty == true)
    }

    @Test func changingTheDefaultBindingDropsTokensSavedWithRequestip() throws {
        // Saved tokens are keyed by the credential's fingerprint: one obtained with requestip (bound to an address)
        // must not be reused as if it were bound to the referer.
        let old = try arcgis("client = \"requestip\"")
        let new = try arcgis()
        #expect(old.identityMaterial != new.identityMaterial)
    }

    @Test func oauthCredentialsBindFederatedServerTokensToTheirSyntheticReferer() throws {
        let c = try loader.parse(
            """
            [[credential]]
            name = "app"
            type = "oauth-app"
            client_id = "id"
            client_secret = "s"
            portal_url = "https://gis.example.com/portal"
            match = "https://gis.example.com/"
            """
        ).credentials[0]
        #expect(TokenBinding.of(c) == .referer("app://authproxy/app"))
    }

    @Test func checkWarnsAboutRequestipWithAFleetOrSeveralParents() throws {
        let ip = try arcgis("client = \"requestip\"", name: "ipbound")
        let referer = try arcgis(name: "bound")
        var one = UpstreamProxyConfig()
        one.parents = [try #require(ParentProxy.parse("http://p1.example:3128"))]
        var two = one
        two.parents.append(try #require(ParentProxy.parse("http://p2.example:3128")))
        var pac = UpstreamProxyConfig()
        pac.pac = .file("/etc/proxy.pac")

        #expect(TokenBinding.warnings([ip, referer], clustered: false, upstream: one).isEmpty)
        let fleet = TokenBinding.warnings([ip, referer], clustered: true, upstream: one)
        #expect(fleet.count == 1)
        #expect(fleet[0].contains("'ipbound'") && fleet[0].contains("[cluster]"))
        let failover = TokenBinding.warnings([ip], clustered: false, upstream: two)
        #expect(failover.count == 1 && failover[0].contains("upstream_proxy"))
        let viaPAC = TokenBinding.warnings([ip], clustered: false, upstream: pac)
        #expect(viaPAC.count == 1 && viaPAC[0].contains("upstream_pac"))
        #expect(TokenBinding.warnings([referer], clustered: true, upstream: two).isEmpty)
    }
}
