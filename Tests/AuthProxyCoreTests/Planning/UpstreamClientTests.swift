import Testing

@testable import AuthProxyCore

/// Which client carries a forwarded request: decided with the plan, read by the executor.
@Suite struct UpstreamClientTests {
    /// The route of a request through parents, the parents' login being a password with `schemes` (nil: none).
    static func route(_ parents: [String], login schemes: Set<PasswordScheme>? = nil) -> ParentRoute {
        var u = UpstreamProxyConfig()
        u.parents = parents.compactMap(ParentProxy.parse)
        var credentials: [Credential] = []
        if let schemes {
            u.credentialName = "corp"
            credentials.append(
                Credential(
                    name: "corp",
                    kind: PasswordSettings(
                        username: "u", password: "p", domain: nil, schemes: schemes, allowBasicOverHTTP: true),
                    match: [], placement: .param, overrideClientToken: false, line: 1))
        }
        let routing = ParentRouting(config: u, credentials: credentials, health: ParentHealth(backoffSeconds: 30))
        return ParentRoute(candidates: u.parents, routing: routing)
    }

    struct Row: CustomStringConvertible {
        let configured: HTTPClientChoice
        let credential: Bool
        let route: ParentRoute?
        let scheme: String
        let upgrade: Bool
        let expected: UpstreamClient
        var description: String {
            "\(configured) cred=\(credential) parents=\(route?.candidates.map(\.url) ?? []) \(scheme) ws=\(upgrade)"
        }
    }

    static let rows: [Row] = [
        Row(configured: .native, credential: false, route: nil, scheme: "http", upgrade: false, expected: .own),
        Row(configured: .native, credential: false, route: nil, scheme: "https", upgrade: false, expected: .own),
        Row(configured: .libcurl, credential: false, route: nil, scheme: "https", upgrade: false, expected: .libcurl),
        // A network login is answered by libcurl (NTLM and Negotiate bind to its connection).
        Row(configured: .native, credential: true, route: nil, scheme: "https", upgrade: false, expected: .libcurl),
        // Plain http through http parents goes in absolute form over the own client, with no login or a Basic-only
        // one sent with the request ...
        Row(
            configured: .native, credential: false, route: route(["http://p1:3128", "http://p2:3128"]),
            scheme: "http", upgrade: false, expected: .own),
        Row(
            configured: .native, credential: false, route: route(["http://p1:3128"], login: [.basic]),
            scheme: "http", upgrade: false, expected: .own),
        // ... a login negotiated from the parent's 407, or an https parent (absolute form over TLS), is libcurl's.
        Row(
            configured: .native, credential: false, route: route(["http://p1:3128"], login: [.basic, .ntlm]),
            scheme: "http", upgrade: false, expected: .libcurl),
        Row(
            configured: .native, credential: false, route: route(["http://p1:3128", "https://p2:3129"]),
            scheme: "http", upgrade: false, expected: .libcurl),
        // https goes inside CONNECT, made by the connector, whatever the parent's login.
        Row(
            configured: .native, credential: false, route: route(["http://p1:3128"], login: [.ntlm]),
            scheme: "https", upgrade: false, expected: .own),
        // A WebSocket goes over the own client, which hands its connection over after the 101.
        Row(
            configured: .libcurl, credential: false, route: route(["http://p1:3128"]), scheme: "http", upgrade: true,
            expected: .own),
        // ... unless a network credential needs libcurl (the planner refuses that WebSocket before it goes).
        Row(configured: .native, credential: true, route: nil, scheme: "https", upgrade: true, expected: .libcurl),
    ]

    @Test(arguments: rows)
    func theChoice(_ row: Row) {
        var network = NetworkAuth()
        if row.credential {
            network.password = PasswordSettings(
                username: "u", password: "p", domain: nil, schemes: [.basic], allowBasicOverHTTP: false)
        }
        #expect(
            UpstreamClient.choose(
                configured: row.configured, network: network, route: row.route, upstreamScheme: row.scheme,
                isUpgrade: row.upgrade) == row.expected)
    }

    /// The Basic login goes only to the parents `upstream_proxy_credential_parents` names.
    @Test func theBasicLoginGoesOnlyToTheParentsItIsFor() {
        var r = Self.route(["http://p1:3128", "http://p2:3128"], login: [.basic])
        #expect(r.routing.proxyAuthorization(for: r.candidates[0]) == "Basic dTpw")
        var u = r.routing.config
        u.credentialParents = ["p1:3128"]
        let routing = ParentRouting(config: u, credentials: [], health: ParentHealth(backoffSeconds: 30))
        r = ParentRoute(candidates: u.parents, routing: routing)
        // No credential in this generation: nothing to send, and nothing that needs libcurl.
        #expect(routing.proxyAuthorization(for: r.candidates[1]) == nil)
        #expect(routing.ownClientForwards(through: r.candidates[1]))
    }
}
