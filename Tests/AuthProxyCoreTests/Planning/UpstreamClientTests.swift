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
        /// The password credential's schemes (nil: none).
        let credential: Set<PasswordScheme>?
        let route: ParentRoute?
        let scheme: String
        let upgrade: Bool
        let expected: UpstreamClient
        var description: String {
            "\(configured) cred=\(credential.map { $0.map(\.rawValue).sorted() } ?? []) parents=\(route?.candidates.map(\.url) ?? []) \(scheme) ws=\(upgrade)"
        }
    }

    static let rows: [Row] = [
        Row(configured: .native, credential: nil, route: nil, scheme: "http", upgrade: false, expected: .own),
        Row(configured: .native, credential: nil, route: nil, scheme: "https", upgrade: false, expected: .own),
        Row(configured: .libcurl, credential: nil, route: nil, scheme: "https", upgrade: false, expected: .libcurl),
        // A login that may be NTLM is libcurl's (its handshake binds to libcurl's connection); Digest, alone or with
        // Basic, is answered by the own client ...
        Row(
            configured: .native, credential: [.basic, .digest, .ntlm], route: nil, scheme: "https", upgrade: false,
            expected: .libcurl),
        Row(configured: .native, credential: [.digest], route: nil, scheme: "https", upgrade: false, expected: .own),
        Row(configured: .native, credential: [.digest], route: nil, scheme: "http", upgrade: false, expected: .own),
        Row(
            configured: .native, credential: [.basic, .digest], route: nil, scheme: "http", upgrade: false,
            expected: .own),
        Row(
            configured: .native, credential: [.digest, .ntlm], route: nil, scheme: "http", upgrade: false,
            expected: .libcurl),
        Row(
            configured: .libcurl, credential: [.digest], route: nil, scheme: "http", upgrade: false,
            expected: .libcurl),
        Row(configured: .native, credential: [.ntlm], route: nil, scheme: "http", upgrade: false, expected: .libcurl),
        Row(
            configured: .native, credential: [.basic, .ntlm], route: nil, scheme: "https", upgrade: false,
            expected: .libcurl),
        // ... Basic alone is one header sent at once: the own client's, unless libcurl was chosen.
        Row(configured: .native, credential: [.basic], route: nil, scheme: "https", upgrade: false, expected: .own),
        Row(configured: .native, credential: [.basic], route: nil, scheme: "http", upgrade: false, expected: .own),
        Row(
            configured: .libcurl, credential: [.basic], route: nil, scheme: "https", upgrade: false, expected: .libcurl),
        // Plain http through http parents goes in absolute form over the own client, with no login or a Basic-only
        // one sent with the request ...
        Row(
            configured: .native, credential: nil, route: route(["http://p1:3128", "http://p2:3128"]),
            scheme: "http", upgrade: false, expected: .own),
        Row(
            configured: .native, credential: nil, route: route(["http://p1:3128"], login: [.basic]),
            scheme: "http", upgrade: false, expected: .own),
        // ... an https parent too (absolute form over the connector's TLS to the parent), and a SOCKS one (the
        // request inside its tunnel) ...
        Row(
            configured: .native, credential: nil, route: route(["http://p1:3128", "https://p2:3129"]),
            scheme: "http", upgrade: false, expected: .own),
        Row(
            configured: .native, credential: nil, route: route(["https://p2:3129"], login: [.basic]),
            scheme: "http", upgrade: false, expected: .own),
        Row(
            configured: .native, credential: nil, route: route(["http://p1:3128", "socks5h://p3:1080"]),
            scheme: "http", upgrade: false, expected: .own),
        // ... but a login negotiated from the parent's 407 is libcurl's (NTLM and Negotiate bind to its connection).
        Row(
            configured: .native, credential: nil, route: route(["http://p1:3128"], login: [.basic, .ntlm]),
            scheme: "http", upgrade: false, expected: .libcurl),
        Row(
            configured: .native, credential: nil, route: route(["https://p2:3129"], login: [.ntlm]),
            scheme: "http", upgrade: false, expected: .libcurl),
        // https goes inside CONNECT, made by the connector, whatever the parent's login.
        Row(
            configured: .native, credential: nil, route: route(["http://p1:3128"], login: [.ntlm]),
            scheme: "https", upgrade: false, expected: .own),
        // A WebSocket goes over the own client, which hands its connection over after the 101.
        Row(
            configured: .libcurl, credential: nil, route: route(["http://p1:3128"]), scheme: "http", upgrade: true,
            expected: .own),
        Row(configured: .libcurl, credential: [.basic], route: nil, scheme: "https", upgrade: true, expected: .own),
        Row(configured: .native, credential: [.basic], route: nil, scheme: "http", upgrade: true, expected: .own),
        // ... unless a network credential needs libcurl (the planner refuses that WebSocket before it goes).
        // (A Digest host's WebSocket handshake is refused before the choice: ``RequestPlanner/webSocketRefusal``.)
        Row(configured: .native, credential: [.digest], route: nil, scheme: "https", upgrade: true, expected: .own),
    ]

    @Test(arguments: rows)
    func theChoice(_ row: Row) {
        var network = NetworkAuth()
        if let schemes = row.credential {
            network.password = PasswordSettings(
                username: "u", password: "p", domain: nil, schemes: schemes, allowBasicOverHTTP: false)
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

    /// The Basic value the own client sends: `user:password` in UTF-8, the user as libcurl sends it (`DOMAIN\user`
    /// with a domain), only where libcurl would send it.
    @Test func theBasicValue() {
        var pw = PasswordSettings(
            username: "alice", password: "alice-pw", domain: nil, schemes: [.basic], allowBasicOverHTTP: false)
        #expect(pw.isBasicOnly)
        #expect(pw.basicAuthorization(overHTTPS: true) == "Basic YWxpY2U6YWxpY2UtcHc=")
        #expect(pw.basicAuthorization(overHTTPS: false) == nil)
        pw.allowBasicOverHTTP = true
        #expect(pw.basicAuthorization(overHTTPS: false) == "Basic YWxpY2U6YWxpY2UtcHc=")
        pw.domain = "CORP"
        // CORP\alice:alice-pw
        #expect(pw.basicAuthorization(overHTTPS: true) == "Basic Q09SUFxhbGljZTphbGljZS1wdw==")
        pw = PasswordSettings(
            username: "jürgen", password: "pässwört€", domain: nil, schemes: [.basic], allowBasicOverHTTP: false)
        // "jürgen:pässwört€" in UTF-8.
        #expect(pw.basicAuthorization(overHTTPS: true) == "Basic asO8cmdlbjpww6Rzc3fDtnJ04oKs")
        pw.schemes = [.basic, .digest]
        #expect(!pw.isBasicOnly)
        #expect(NetworkAuth(password: pw).answersChallenges)
        #expect(!NetworkAuth(password: pw).needsLibcurl)
        pw.schemes = [.digest, .ntlm]
        #expect(NetworkAuth(password: pw).needsLibcurl)
        pw.schemes = [.basic]
        #expect(!NetworkAuth(password: pw).answersChallenges)
        #expect(NetworkAuth(password: pw).logsIn)
    }
}
