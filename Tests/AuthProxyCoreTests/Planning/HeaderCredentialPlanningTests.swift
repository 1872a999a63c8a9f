import Testing

@testable import AuthProxyCore

/// `header` credentials and `layer = "gateway"` stacking, as tables over ``RequestPlanner``.
@Suite struct HeaderCredentialPlanningTests {
    static let store = RequestPlannerTests.store(
        parsing: """
            [proxy]
            listen = ["127.0.0.1:3128"]

            [[credential]]
            name = "iap"
            type = "header"
            layer = "gateway"
            match = ["https://gis.example.com/"]
            headers = { "Authorization" = "Bearer iap", "X-Both" = "gateway" }

            [[credential]]
            name = "key"
            type = "api-key"
            key = "K"
            match = ["https://gis.example.com/arcgis"]

            [[credential]]
            name = "static"
            type = "header"
            match = ["https://gis.example.com/ogc", "https://api.example.com/"]
            headers = { "X-API-Key" = "S", "X-Both" = "service" }
            """)

    static func plan(_ url: String) -> ForwardPlan {
        guard case .success(let plan) = RequestPlannerTests.plan("GET \(url) HTTP/1.1\nHost: x\n\n", store: store)
        else {
            Issue.record("answered locally: \(url)")
            return ForwardPlan(url: URLTarget(scheme: "http", host: "x", port: 80, pathAndQuery: "/"))
        }
        return plan
    }

    static func describe(_ p: ForwardPlan) -> String {
        var parts: [String] = []
        if let c = p.service, c.kind.tokenSource != .none { parts.append("token \(c.name)") }
        // The fields the static (header) credentials set, service first, as they go upstream.
        let statics = [p.service, p.gateway].compactMap { $0 }.filter { $0.kind.tokenSource == .none }
        var r = OutgoingRequest(
            method: "GET", target: p.upstreamURL, fields: HTTPHeaders(), body: nil, bodyLength: nil, isUpgrade: false,
            now: 0, credential: "")
        for c in statics { _ = c.kind.apply(nil, to: &r) }
        parts += r.fields.map { "\($0.name)=\($0.value)" }
        if !statics.isEmpty { parts.append("[\(statics.map(\.name).joined(separator: "+"))]") }
        return parts.joined(separator: " ")
    }

    @Test(arguments: [
        // the gateway alone on the rest of its host
        ("https://gis.example.com/portal/home", "Authorization=Bearer iap X-Both=gateway [iap]"),
        // gateway + the ArcGIS key of the service layer
        ("https://gis.example.com/arcgis/rest/services", "token key Authorization=Bearer iap X-Both=gateway [iap]"),
        // gateway + a static service header: the gateway wins a name both set
        ("https://gis.example.com/ogc/collections", "X-API-Key=S Authorization=Bearer iap X-Both=gateway [static+iap]"),
        // a service header alone, on every path (no ArcGIS API gate)
        ("https://api.example.com/v1/items?x=1", "X-API-Key=S X-Both=service [static]"),
        ("https://other.example.com/", ""),
    ])
    func applies(_ url: String, _ expected: String) {
        #expect(Self.describe(Self.plan(url)) == expected, "\(url)")
    }

    @Test(arguments: [
        ("headers = { \"Host\" = \"x\" }", "credential[0].headers.Host"),
        ("headers = { \"Bad Name\" = \"x\" }", "credential[0].headers.Bad Name"),
        ("headers = { }", "credential[0].headers"),
        ("headers = { \"X-A\" = \"1\", \"x-a\" = \"2\" }", "credential[0].headers.x-a"),
    ])
    func badHeadersAreNamed(_ headers: String, _ key: String) {
        do {
            _ = try ConfigLoader(environment: [:]).parse(
                """
                [[credential]]
                name = "h"
                type = "header"
                match = ["https://x.example/"]
                \(headers)
                """)
            Issue.record("accepted \(headers)")
        } catch {
            #expect(error.key == key, "\(error)")
        }
    }

    @Test func onlyHeaderAndOAuth2CredentialsTakeTheGatewayLayer() {
        do {
            _ = try ConfigLoader(environment: [:]).parse(
                """
                [[credential]]
                name = "k"
                type = "api-key"
                key = "K"
                layer = "gateway"
                match = ["https://x.example/"]
                """)
            Issue.record("accepted a gateway api-key")
        } catch {
            #expect(error.key == "credential[0].layer")
        }
    }
}
