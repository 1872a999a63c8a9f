import Testing

@testable import AuthProxyCore

/// An `oauth2` credential with `layer = "gateway"` stacked on the service credentials, as a table over
/// ``RequestPlanner``: which tokens a request carries, and the requests where two would need one place.
@Suite struct GatewayTokenPlanningTests {
    static let store = RequestPlannerTests.store(
        parsing: """
            [proxy]
            listen = ["127.0.0.1:3128"]

            [[credential]]
            name = "iap"
            type = "oauth2"
            layer = "gateway"
            token_url = "https://login.example.com/token"
            client_id = "proxy"
            client_secret = "s"
            match = ["https://gis.example.com/"]

            [[credential]]
            name = "gis"
            type = "arcgis-token"
            username = "u"
            password = "p"
            match = ["https://gis.example.com/arcgis"]

            [[credential]]
            name = "ogc"
            type = "oauth2"
            token_url = "https://login.example.com/token"
            client_id = "ogc"
            client_secret = "s"
            match = ["https://gis.example.com/ogc"]

            [[credential]]
            name = "ogc-query"
            type = "oauth2"
            token_url = "https://login.example.com/token"
            client_id = "ogc"
            client_secret = "s"
            token_placement = "query"
            match = ["https://gis.example.com/geoserver"]

            [[credential]]
            name = "basic"
            type = "password"
            username = "u"
            password = "p"
            match = ["https://gis.example.com/iwa"]

            [[credential]]
            name = "static-auth"
            type = "header"
            headers = { "Authorization" = "Basic abc" }
            match = ["https://gis.example.com/static"]
            """)

    static func describe(_ r: Result<ForwardPlan, RequestPlannerTests.Answered>) -> String {
        let p: ForwardPlan
        switch r {
        case .failure(let a): return "\(a.answer.error.status) \(a.answer.error.message)"
        case .success(let plan): p = plan
        }
        var parts: [String] = []
        if let g = p.gateway { parts.append("gateway \(g.name) \(RequestPlannerTests.site(p, g, layer: .gateway))") }
        if let c = p.service { parts.append("token \(c.name) \(RequestPlannerTests.site(p, c, layer: .service))") }
        if let r = p.replayLimit { parts.append("replay \(r)") }
        return parts.joined(separator: " ")
    }

    @Test(arguments: [
        // the gateway's token alone on the rest of its host (portal home pages, static files)
        ("GET https://gis.example.com/portal/home HTTP/1.1\n\n", "gateway iap header"),
        // gateway + the ArcGIS token (in the query, where ArcGIS reads it first)
        ("GET https://gis.example.com/arcgis/rest/services?f=json HTTP/1.1\n\n", "gateway iap header token gis query"),
        // the client's own ArcGIS token is left alone; the gateway's still goes in: the client cannot know it
        ("GET https://gis.example.com/arcgis/rest/services?token=mine HTTP/1.1\n\n", "gateway iap header"),
        // a body is kept for the retry after the gateway's rejection
        (
            "POST https://gis.example.com/portal/upload HTTP/1.1\nContent-Length: 5\n\n",
            "gateway iap header replay 100"
        ),
        // a service bearer in the query next to the gateway's in the header
        ("GET https://gis.example.com/geoserver/wms HTTP/1.1\n\n", "gateway iap header token ogc-query query"),
        // two tokens for one Authorization header: refused, naming both
        (
            "GET https://gis.example.com/ogc/collections HTTP/1.1\n\n",
            "502 Credentials 'iap' (gateway) and 'ogc' both need this request's Authorization header"
        ),
        (
            "GET https://gis.example.com/iwa/x HTTP/1.1\n\n",
            "502 Credentials 'iap' (gateway) and 'basic' both need this request's Authorization header"
        ),
        (
            "GET https://gis.example.com/static/x HTTP/1.1\n\n",
            "502 Credentials 'iap' (gateway) and 'static-auth' both need this request's Authorization header"
        ),
        ("GET https://other.example.com/ HTTP/1.1\n\n", ""),
    ])
    func layers(_ request: String, _ expected: String) {
        #expect(Self.describe(RequestPlannerTests.plan(request, store: Self.store)) == expected, "\(request)")
    }
}
