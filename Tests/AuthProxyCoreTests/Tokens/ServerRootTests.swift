import Testing

@testable import AuthProxyCore

/// Which URLs are in an ArcGIS API that takes tokens, their roots, and the token keys of those roots.
@Suite struct ServerRootTests {
    static func target(_ s: String) -> URLTarget? {
        guard case .absolute(let t)? = try? RequestHeadParser.parseTarget(method: "GET", s) else { return nil }
        return t
    }

    static func api(_ s: String) -> ServerRoot.API? {
        target(s).flatMap(ServerRoot.api).map { ServerRoot.API(root: $0.root, isPortal: $0.isPortal) }
    }

    @Test(arguments: [
        ("https://h/arcgis/rest/services/A/FeatureServer/0/query?f=json", "https://h/arcgis", false),
        ("https://h/arcgis/rest", "https://h/arcgis", false),
        ("https://h/arcgis/tokens/generateToken", "https://h/arcgis", false),
        ("https://h/arcgis/admin/services?f=json", "https://h/arcgis", false),
        ("https://h/arcgis/services/Basemap/MapServer/WMSServer?request=GetCapabilities", "https://h/arcgis", false),
        ("https://h/portal/sharing/rest/portals/self", "https://h/portal", true),
        ("https://h/portal/sharing", "https://h/portal", true),
        ("https://h/portal/sharing/oauth2/approval?code=x", "https://h/portal", true),
        ("https://h/portal/portaladmin/?f=json", "https://h/portal", true),
        ("https://www.arcgis.com/sharing/rest/content", "https://www.arcgis.com", true),
        // The earliest API segment decides: a REST path may name folders called `services` or `admin`.
        ("https://h/server/rest/services/admin/Points/MapServer", "https://h/server", false),
        ("https://h:8443/Server/REST/info", "https://h:8443/Server", false),
    ])
    func apiURLs(_ url: String, _ root: String, _ isPortal: Bool) {
        #expect(Self.api(url) == ServerRoot.API(root: root, isPortal: isPortal), "\(url)")
    }

    /// Pages outside the APIs need no token: the proxy forwards them untouched.
    @Test(arguments: [
        "https://h/portal/home/index.html", "https://h/portal/apps/mapviewer/index.html", "https://h/portal",
        "https://h/arcgis/manager/", "https://h/", "https://h/portal/home/restaurants.html",
        "https://h/portal/sharingcenter/x", "https://h/arcgis/restore",
    ])
    func otherPagesAreOutside(_ url: String) {
        #expect(Self.api(url) == nil, "\(url)")
    }

    @Test func portalAndServerRootsUnderOnePathNeverShareAKey() throws {
        let portal = try #require(Self.target("https://h/portal/sharing/rest/portals/self"))
        let page = try #require(Self.target("https://h/portal/home/index.html"))
        let c = Credential(
            name: "fed",
            kind: .arcgisToken(
                ArcGISTokenSettings(
                    username: "u", password: "p", tokenURL: nil, referer: nil, expirationMinutes: nil,
                    client: "requestip")),
            match: [], placement: .param, overrideClientToken: false, line: 1)
        #expect(TokenService.key(for: c, target: portal) != TokenService.key(for: c, target: page))
        #expect(
            TokenService.key("fed", root: "https://h/portal", isPortal: true)
                != TokenService.key("fed", root: "https://h/portal", isPortal: false))
        // The same portal, however its root is written.
        #expect(
            TokenService.key("fed", root: "https://H/portal/", isPortal: true)
                == TokenService.key(for: c, target: portal))
    }
}
