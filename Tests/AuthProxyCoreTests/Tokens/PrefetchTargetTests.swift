import Testing

@testable import AuthProxyCore

@Suite struct PrefetchTargetTests {
    func credential(_ body: String) throws -> Credential { try TokenTestSupport.credential(body) }

    func key(_ c: Credential, _ url: String) throws -> String { TokenTestSupport.key(c, url) }

    @Test func aPortalMatchIsPrefetchedUnderTheKeyItsAPIRequestsUse() throws {
        let c = try credential(
            """
            [[credential]]
            name = "app"
            type = "oauth-app"
            client_id = "id"
            client_secret = "secret"
            portal_url = "https://gis.example.com/portal"
            match = ["https://gis.example.com/portal", "https://gis.example.com/arcgis", "https://gis.example.com"]
            prefetch = true
            """)
        let keys = Set(TokenService.prefetchKeys([c]).map(\.key))
        #expect(
            keys == [
                try key(c, "https://gis.example.com/portal/sharing/rest/portals/self?f=json"),
                try key(c, "https://gis.example.com/arcgis/rest/services?f=json"),
            ])
        // The host alone names no root: not prefetched, and said so.
        #expect(TokenService.unprefetchable(c) == ["https://gis.example.com"])
    }

    @Test func aTokenURLUnderSharingNamesThePortal() throws {
        let c = try credential(
            """
            [[credential]]
            name = "t"
            type = "arcgis-token"
            username = "u"
            password = "p"
            token_url = "https://gis.example.com/portal/sharing/rest/generateToken"
            match = ["https://gis.example.com/portal"]
            prefetch = true
            """)
        #expect(
            TokenService.prefetchKeys([c]).map(\.key)
                == [try key(c, "https://gis.example.com/portal/sharing/rest/content?f=json")])
        #expect(TokenService.unprefetchable(c).isEmpty)
    }
}
