import Testing

@testable import AuthProxyCore

/// `[proxy] upstream_proxy` and its companions as the configuration loader reads them, and the planner's route.
@Suite struct UpstreamProxyConfigTests {
    static func load(_ proxy: String, credentials: String = "") throws(ConfigError) -> ProxyConfig {
        try ConfigLoader(environment: [:]).parse(
            "[proxy]\nlisten = [\"127.0.0.1:3128\"]\n" + proxy + "\n" + credentials)
    }

    static let parentCredential = """
        [[credential]]
        name = "corp"
        type = "password"
        username = "alice"
        password = "pw"
        """

    @Test func aListWithACredentialThatHasNoMatch() throws {
        let c = try Self.load(
            """
            upstream_proxy = ["http://p1.corp:8080", "https://p2.corp"]
            upstream_proxy_credential = "corp"
            upstream_proxy_backoff_seconds = 7
            no_proxy = ["localhost", ".corp.example", "10.0.0.0/8"]
            """, credentials: Self.parentCredential)
        #expect(c.upstreamProxy.parents.map(\.url) == ["http://p1.corp:8080", "https://p2.corp:443"])
        #expect(c.upstreamProxy.credentialName == "corp")
        #expect(c.upstreamProxy.backoffSeconds == 7)
        #expect(c.credentials.first?.match.isEmpty == true)
        #expect(c.upstreamProxy.parents(host: "gis.example.com", port: 443).count == 2)
        #expect(c.upstreamProxy.parents(host: "a.corp.example", port: 443).isEmpty)
        #expect(c.upstreamProxy.parents(host: "10.2.3.4", port: 80).isEmpty)
    }

    @Test(arguments: [
        ("upstream_proxy = \"proxy:8080\"", "proxy.upstream_proxy"),
        ("upstream_proxy = [\"http://p:1\", \"http://p:1\"]", "proxy.upstream_proxy"),
        ("upstream_proxy = \"http://p:1\"\nupstream_proxy_credential = \"nobody\"", "proxy.upstream_proxy_credential"),
        ("upstream_proxy = \"http://p:1\"\nno_proxy = [\"a b\"]", "proxy.no_proxy"),
        ("no_proxy = [\"localhost\"]", "proxy.no_proxy"),
    ])
    func errorsNameTheKey(_ proxy: String, _ key: String) {
        do {
            _ = try Self.load(proxy)
            Issue.record("accepted: \(proxy)")
        } catch {
            #expect(error.key == key, "\(error)")
        }
    }

    @Test func theParentCredentialMustBePasswordOrKerberos() {
        do {
            _ = try Self.load(
                "upstream_proxy = \"http://p:1\"\nupstream_proxy_credential = \"k\"",
                credentials: """
                    [[credential]]
                    name = "k"
                    type = "api-key"
                    key = "K"
                    match = ["https://x.example"]
                    """)
            Issue.record("accepted an api-key parent credential")
        } catch {
            #expect(error.key == "proxy.upstream_proxy_credential")
        }
    }

    @Test func otherCredentialsStillNeedMatch() {
        do {
            _ = try Self.load(
                "upstream_proxy = \"http://p:1\"\nupstream_proxy_credential = \"corp\"",
                credentials: Self.parentCredential + "\n[[credential]]\nname = \"x\"\ntype = \"api-key\"\nkey = \"K\"\n"
            )
            Issue.record("accepted a credential without match")
        } catch {
            #expect(error.key.hasSuffix(".match"), "\(error)")
        }
    }
}

/// What the planner decides for a request when parents are configured.
@Suite struct ParentRoutePlanningTests {
    static let routing: ParentRouting = {
        var u = UpstreamProxyConfig()
        u.parents = [ParentProxy(scheme: .http, host: "parent", port: 3128)]
        u.noProxy = try! NoProxyList.parse(["direct.example"]).get()
        return ParentRouting(config: u, credentials: [], health: ParentHealth(backoffSeconds: 30))
    }()

    static func plan(
        _ request: String, deny: [AddressBlock] = AddressBlock.defaultDenied, via: String? = "1.1 authproxy-0000beef"
    )
        -> Result<ForwardPlan, RequestPlannerTests.Answered>
    {
        let h = RequestPlannerTests.head(request)
        guard case .absolute(let url) = h.target else { fatalError("not absolute") }
        var plan = ForwardPlan(url: url)
        if let a = RequestPlanner.plan(
            h, url: url, store: CredentialStore([]),
            settings: .init(
                unmatched: .relay,
                maxReplayBytes: 100, routing: routing, denyDestinations: deny, ownVia: via),
            into: &plan)
        {
            return .failure(.init(answer: a))
        }
        return .success(plan)
    }

    @Test(arguments: [
        ("GET http://gis.example.com/x HTTP/1.1\nHost: gis.example.com\n\n", "parent:3128"),
        ("GET http://direct.example/x HTTP/1.1\nHost: direct.example\n\n", "direct"),
        ("GET http://sub.direct.example/x HTTP/1.1\nHost: sub.direct.example\n\n", "direct"),
        // deny_destinations still holds for an IP literal the parent would reach
        ("GET http://169.254.169.254/latest HTTP/1.1\nHost: 169.254.169.254\n\n", "answer 403"),
        // a request that already went through this process
        (
            "GET http://gis.example.com/x HTTP/1.1\nHost: gis.example.com\nVia: 1.1 squid, 1.1 authproxy-0000beef\n\n",
            "answer 508"
        ),
        (
            "GET http://gis.example.com/x HTTP/1.1\nHost: gis.example.com\nVia: 1.1 authproxy-0000cafe\n\n",
            "parent:3128"
        ),
    ])
    func routes(_ request: String, _ expected: String) {
        let got: String
        switch Self.plan(request) {
        case .failure(let a): got = "answer \(a.answer.error.status)"
        case .success(let p):
            got = p.parentRoute.map { $0.candidates.map(\.authority).joined(separator: ",") } ?? "direct"
        }
        #expect(got == expected, "\(request)")
    }

    /// The client is planned with the route: plain http through an `http` parent with no login in absolute form and
    /// https through it inside CONNECT (both the own client over the ``Connector``), a WebSocket always over the own
    /// client.
    @Test(arguments: [
        ("GET http://gis.example.com/x HTTP/1.1\nHost: gis.example.com\n\n", UpstreamClient.own),
        ("GET https://gis.example.com/x HTTP/1.1\nHost: gis.example.com\n\n", .own),
        ("GET http://direct.example/x HTTP/1.1\nHost: direct.example\n\n", .own),
        (
            "GET http://gis.example.com/ws HTTP/1.1\nHost: gis.example.com\nConnection: Upgrade\nUpgrade: websocket\n"
                + "Sec-WebSocket-Version: 13\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\n\n",
            .own
        ),
    ])
    func theClientIsPlannedWithTheRoute(_ request: String, _ expected: UpstreamClient) {
        guard case .success(let p) = Self.plan(request) else {
            Issue.record("answered locally: \(request)")
            return
        }
        #expect(p.client == expected, "\(request)")
    }

    /// A blind tunnel's route is planned with the CONNECT, on the rules of a forwarded request's.
    @Test(arguments: [
        ("elsewhere.example.com", 443, "parent:3128"),
        ("direct.example", 443, "direct"),
        ("sub.direct.example", 8443, "direct"),
        // deny_destinations still holds for an IP literal the parent would reach
        ("169.254.169.254", 443, "refused 403"),
        ("10.1.2.3", 443, "parent:3128"),
    ])
    func tunnelRoutes(_ host: String, _ port: Int, _ expected: String) {
        let decision = RequestPlanner.connect(
            host: host, port: port, store: CredentialStore([]), connectPorts: [443, 8443], unmatched: .relay,
            routing: Self.routing, denyDestinations: AddressBlock.defaultDenied)
        #expect(Self.describe(decision) == "blind, \(expected)", "\(host):\(port)")
    }

    @Test func aTunnelWithoutParentsGoesDirect() {
        let decision = RequestPlanner.connect(
            host: "elsewhere.example.com", port: 443, store: CredentialStore([]), connectPorts: [443],
            unmatched: .relay, routing: nil, denyDestinations: AddressBlock.defaultDenied)
        #expect(Self.describe(decision) == "blind, direct")
    }

    /// TLS inside a CONNECT to a matched host that cannot be intercepted is relayed blindly, along the same route.
    @Test func aServedTunnelTurnedBlindHasItsRoute() {
        let served = RequestPlanner.servedTunnel(
            .tls, host: "gis.example.com", port: 443, canIntercept: false, blindAllowed: true, routing: Self.routing,
            denyDestinations: AddressBlock.defaultDenied)
        guard case .blind(.parents(let r)) = served else {
            Issue.record("\(served)")
            return
        }
        #expect(r.candidates.map(\.authority) == ["parent:3128"])
        let bypassed = RequestPlanner.servedTunnel(
            .tls, host: "direct.example", port: 443, canIntercept: false, blindAllowed: true, routing: Self.routing,
            denyDestinations: AddressBlock.defaultDenied)
        #expect(bypassed == .blind(.direct))
    }

    /// With `upstream_pac` and no file loaded yet, no route is guessed.
    @Test func aTunnelWithoutALoadedPacFileIsRefused() {
        var u = UpstreamProxyConfig()
        u.pac = .file("/nonexistent/proxy.pac")
        let routing = ParentRouting(
            config: u, credentials: [], health: ParentHealth(backoffSeconds: 30), pac: PacResolver())
        let decision = RequestPlanner.connect(
            host: "elsewhere.example.com", port: 443, store: CredentialStore([]), connectPorts: [443],
            unmatched: .relay, routing: routing, denyDestinations: [])
        #expect(Self.describe(decision) == "blind, refused 502")
    }

    static func describe(_ d: ConnectDecision) -> String {
        switch d {
        case .refuse(let e, _): return "answer \(e.status)"
        case .serve: return "serve"
        case .blind(.direct): return "blind, direct"
        case .blind(.parents(let r)): return "blind, " + r.candidates.map(\.authority).joined(separator: ",")
        case .blind(.pending): return "blind, pending"
        case .blind(.refused(let e)): return "blind, refused \(e.status)"
        }
    }
}
