import Testing

@testable import AuthProxyCore

/// An IAP gateway whose ID token goes in `Proxy-Authorization`, stacked on the service credentials, as a table over
/// ``RequestPlanner``: it shares the request with anything that writes `Authorization` (a service bearer, static
/// fields, a password login), and clashes only with a second `Proxy-Authorization` token.
@Suite struct ProxyAuthorizationPlanningTests {
    static let store = RequestPlannerTests.store(
        parsing: """
            [proxy]
            listen = ["127.0.0.1:3128"]

            [[credential]]
            name = "iap"
            type = "oauth2"
            layer = "gateway"
            token_url = "https://oauth2.googleapis.com/token"
            client_id = "sa@p.iam.gserviceaccount.com"
            client_secret = "s"
            token_placement = "proxy-authorization"
            match = ["https://gis.example.com/"]

            [[credential]]
            name = "ogc"
            type = "oauth2"
            token_url = "https://login.example.com/token"
            client_id = "ogc"
            client_secret = "s"
            match = ["https://gis.example.com/ogc"]

            [[credential]]
            name = "other-iap"
            type = "oauth2"
            token_url = "https://login.example.com/token"
            client_id = "x"
            client_secret = "s"
            token_placement = "proxy-authorization"
            match = ["https://gis.example.com/nested"]

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
        switch r {
        case .failure(let a): return "\(a.answer.error.status) \(a.answer.error.message)"
        case .success(let p):
            var parts: [String] = []
            if let g = p.gateway { parts.append("gateway \(g.name)") }
            if let c = p.service { parts.append("token \(c.name)") }
            return parts.joined(separator: " ")
        }
    }

    @Test(arguments: [
        ("GET https://gis.example.com/ogc/collections HTTP/1.1\n\n", "gateway iap token ogc"),
        // the client's own Authorization is for the service: the gateway's token still goes in
        ("GET https://gis.example.com/portal HTTP/1.1\nAuthorization: Bearer mine\n\n", "gateway iap"),
        ("GET https://gis.example.com/iwa/x HTTP/1.1\n\n", "gateway iap"),
        ("GET https://gis.example.com/static/x HTTP/1.1\n\n", "gateway iap token static-auth"),
        (
            "GET https://gis.example.com/nested/x HTTP/1.1\n\n",
            "502 Credentials 'iap' (gateway) and 'other-iap' both put their token in the proxy-authorization field"
        ),
    ])
    func layers(_ request: String, _ expected: String) {
        #expect(Self.describe(RequestPlannerTests.plan(request, store: Self.store)) == expected, "\(request)")
    }

    @Test func theGatewaysTokenGoesInProxyAuthorizationAndTheServiceKeepsAuthorization() throws {
        let plan = try RequestPlannerTests.plan(
            "GET https://gis.example.com/ogc/collections HTTP/1.1\nProxy-Authorization: Basic Y2xpZW50\n\n",
            store: Self.store
        ).get()
        var r = OutgoingRequest(
            method: "GET", target: plan.upstreamURL,
            fields: HTTPHeaders([("Proxy-Authorization", "Basic Y2xpZW50")]), body: nil, bodyLength: nil,
            isUpgrade: false, now: 0, credential: "ogc")
        let service = try #require(plan.service)
        let gateway = try #require(plan.gateway)
        r.layer = .service
        _ = service.kind.apply(IssuedToken(value: "SVC", expires: nil, issued: 0, ssl: false, referer: nil), to: &r)
        r.layer = .gateway
        _ = gateway.kind.apply(IssuedToken(value: "ID", expires: nil, issued: 0, ssl: false, referer: nil), to: &r)
        var forwarded: [String] = []
        r.fields.forEachForwardedField { forwarded.append("\($0): \($1)") }
        #expect(forwarded == ["Authorization: Bearer SVC", "Proxy-Authorization: Bearer ID"])
    }
}
