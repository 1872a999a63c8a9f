import Testing

@testable import AuthProxyCore

/// The routing rules the README states for forwarded requests, as tables over ``RequestPlanner``: no sockets.
@Suite struct RequestPlannerTests {
    static let config = """
        [proxy]
        listen = ["127.0.0.1:3128"]

        [[credential]]
        name = "key"
        type = "api-key"
        key = "K"
        match = ["http://gis.example.com/arcgis"]

        [[credential]]
        name = "hdr"
        type = "api-key"
        key = "H"
        token_placement = "header"
        match = ["http://hdr.example.com/arcgis"]

        [[credential]]
        name = "ent"
        type = "arcgis-token"
        username = "u"
        password = "p"
        upgrade_to_https = true
        match = ["http://ent.example.com/server"]

        [[credential]]
        name = "win"
        type = "password"
        username = "u"
        password = "p"
        schemes = ["ntlm"]
        match = ["http://win.example.com/"]

        [[credential]]
        name = "over"
        type = "api-key"
        key = "O"
        override_client_token = true
        match = ["http://over.example.com/arcgis"]
        """

    static let store = store(parsing: config)

    /// The credentials of a configuration text (a test's table of credentials).
    static func store(parsing config: String) -> CredentialStore {
        CredentialStore(try! ConfigLoader(environment: [:]).parse(config).credentials)
    }

    static func head(_ text: String) -> RequestHead {
        var parser = RequestHeadParser()
        let bytes = Array(text.replacingOccurrences(of: "\n", with: "\r\n").utf8)
        guard case .complete(let h, _) = bytes.withUnsafeBytes({ parser.parse($0) }) else {
            fatalError("not a request head: \(text)")
        }
        return h
    }

    struct Answered: Error { let answer: PlannedAnswer }

    static func plan(
        _ request: String, store: CredentialStore = store, unmatched: UnmatchedPolicy = .relay,
        ownsUpstreams: Bool = false
    ) -> Result<ForwardPlan, Answered> {
        let h = head(request)
        guard case .absolute(let url) = h.target else { fatalError("not absolute: \(request)") }
        var plan = ForwardPlan(url: url)
        if let a = RequestPlanner.plan(
            h, url: url, store: store,
            settings: .init(unmatched: unmatched, maxReplayBytes: 100, ownsUpstreams: ownsUpstreams), into: &plan)
        {
            return .failure(Answered(answer: a))
        }
        return .success(plan)
    }

    static func token(_ r: Result<ForwardPlan, Answered>) -> String {
        switch r {
        case .failure(let a): return "answer \(a.answer.error.status)"
        case .success(let p):
            guard let c = p.service else { return "none" }
            return "\(c.name) \(site(p, c, layer: .service))\(p.holdsBody ? " form" : "")"
        }
    }

    /// Where `c`'s kind puts a token on the planned request (a GET, or a form when the plan holds the body):
    /// "query", "form" or "header".
    static func site(_ p: ForwardPlan, _ c: Credential, layer: Credential.Layer) -> String {
        var r = OutgoingRequest(
            method: p.holdsBody ? "POST" : "GET", target: p.upstreamURL,
            fields: p.holdsBody ? HTTPHeaders([("Content-Type", "application/x-www-form-urlencoded")]) : HTTPHeaders(),
            body: p.holdsBody ? [] : nil, bodyLength: p.holdsBody ? 0 : nil, isUpgrade: false, now: 0,
            credential: c.name, placement: c.placement)
        r.layer = layer
        _ = c.kind.apply(IssuedToken(value: "T0K", expires: nil, issued: 0, ssl: false, referer: nil), to: &r)
        if let b = r.body, String(decoding: b, as: UTF8.self).contains("T0K") { return "form" }
        return r.target.pathAndQuery.contains("=T0K") ? "query" : "header"
    }

    @Test(arguments: [
        // matched, with the path normalised first
        ("GET http://gis.example.com/arcgis/rest/services HTTP/1.1\nHost: gis.example.com\n\n", "key query"),
        ("GET http://gis.example.com/arcgis/../other HTTP/1.1\nHost: gis.example.com\n\n", "none"),
        ("GET http://gis.example.com/arcgis/%2e%2e/other HTTP/1.1\nHost: gis.example.com\n\n", "none"),
        // the raw form selects no credential: a front end routing on it sees /other
        ("GET http://gis.example.com/other/../arcgis/x HTTP/1.1\nHost: gis.example.com\n\n", "none"),
        // ambiguous paths on a host with credentials, and TRACE
        ("GET http://gis.example.com/arcgis/%2F..%2Fadmin HTTP/1.1\nHost: gis.example.com\n\n", "answer 400"),
        ("GET http://gis.example.com/arcgis/%u002e%u002e/admin HTTP/1.1\nHost: gis.example.com\n\n", "answer 400"),
        ("TRACE http://gis.example.com/arcgis/x HTTP/1.1\nHost: gis.example.com\n\n", "answer 405"),
        // elsewhere the same shapes are relayed
        ("GET http://other.example.com/a/%u002e HTTP/1.1\nHost: other.example.com\n\n", "none"),
        ("TRACE http://other.example.com/x HTTP/1.1\nHost: other.example.com\n\n", "none"),
        // placements: header, and a small urlencoded form collected, a chunked one in the URL
        ("GET http://hdr.example.com/arcgis/rest HTTP/1.1\nHost: hdr.example.com\n\n", "hdr header"),
        (
            "POST http://gis.example.com/arcgis/rest/q HTTP/1.1\nHost: gis.example.com\nContent-Type: application/x-www-form-urlencoded\nContent-Length: 3\n\n",
            "key form form"
        ),
        (
            "POST http://gis.example.com/arcgis/rest/q HTTP/1.1\nHost: gis.example.com\nContent-Type: application/x-www-form-urlencoded\nTransfer-Encoding: chunked\n\n",
            "key query"
        ),
        // the client's own token is left alone, unless the credential overrides it
        ("GET http://gis.example.com/arcgis/rest?token=mine HTTP/1.1\nHost: gis.example.com\n\n", "none"),
        (
            "GET http://gis.example.com/arcgis/rest HTTP/1.1\nHost: gis.example.com\nX-Esri-Authorization: Bearer mine\n\n",
            "none"
        ),
        ("GET http://over.example.com/arcgis/rest?token=mine HTTP/1.1\nHost: over.example.com\n\n", "over query"),
        // a refreshable credential outside the ArcGIS APIs obtains nothing
        ("GET http://ent.example.com/server/rest/services HTTP/1.1\nHost: ent.example.com\n\n", "ent query"),
        ("GET http://ent.example.com/server/index.html HTTP/1.1\nHost: ent.example.com\n\n", "none"),
    ])
    func tokens(_ request: String, _ expected: String) {
        #expect(Self.token(Self.plan(request)) == expected, "\(request)")
    }

    @Test func unmatchedDestinationsFollowThePolicy() {
        let r = "GET http://elsewhere.example.com/x HTTP/1.1\nHost: elsewhere.example.com\n\n"
        #expect(Self.token(Self.plan(r)) == "none")
        guard case .failure(let a) = Self.plan(r, unmatched: .deny) else {
            Issue.record("an unmatched destination was forwarded under unmatched = deny")
            return
        }
        #expect(a.answer.error.status == 403 && a.answer.denied == .unmatched)
        // A matched host, but a path outside every prefix, is unmatched too.
        #expect(
            Self.token(
                Self.plan("GET http://gis.example.com/other HTTP/1.1\nHost: gis.example.com\n\n", unmatched: .deny))
                == "answer 403")
    }

    @Test func upgradeToHTTPSChangesTheUpstreamURLOnly() throws {
        let p = try Self.plan("GET http://ent.example.com/server/rest/info HTTP/1.1\nHost: ent.example.com\n\n").get()
        #expect(p.upgradedToHTTPS)
        #expect(p.upstreamURL.url == "https://ent.example.com/server/rest/info")
        #expect(
            p.rateLimitTargets.map(\.url) == [
                "http://ent.example.com/server/rest/info", "https://ent.example.com/server/rest/info",
            ])
        let plain = try Self.plan("GET http://gis.example.com/arcgis/rest HTTP/1.1\nHost: gis.example.com\n\n").get()
        #expect(!plain.upgradedToHTTPS && plain.upstreamURL.url == "http://gis.example.com/arcgis/rest")
    }

    @Test func aClientsOwnLoginWinsOverAPasswordCredential() throws {
        let proxy = try Self.plan("GET http://win.example.com/x HTTP/1.1\nHost: win.example.com\n\n").get()
        #expect(proxy.network.passwordName == "win")
        let own = try Self.plan(
            "GET http://win.example.com/x HTTP/1.1\nHost: win.example.com\nAuthorization: NTLM TlRMTVNTUAABAAAAB4IIogAAAAAAAAAAAAAAAAAAAAAGAbEdAAAADw==\n\n"
        ).get()
        #expect(own.network.password == nil && own.network.passwordName == nil)
    }

    @Test func replayCopiesAreSizedByWhatMaySendTheBodyAgain() throws {
        let post = "POST http://%@/q HTTP/1.1\nHost: h\nContent-Type: application/octet-stream\nContent-Length: 5\n\n"
        func limit(_ host: String) throws -> Int64? {
            try Self.plan(post.replacingOccurrences(of: "%@", with: host)).get().replayLimit
        }
        #expect(try limit("elsewhere.example.com") == Int64(ReplayBuffer.memoryLimit))  // a dead kept-alive connection
        #expect(try limit("win.example.com") == 100)  // NTLM's rounds: max_replay_bytes
        #expect(try limit("ent.example.com/server/rest") == 100)  // a refreshable token's retry
        #expect(
            try Self.plan("GET http://gis.example.com/arcgis/rest HTTP/1.1\nHost: gis.example.com\n\n").get()
                .replayLimit == nil)
    }

    @Test func aClientScopeSeesOnlyItsCredentials() {
        let scoped = CredentialStore(Self.store.credentials.filter { $0.name == "hdr" })
        #expect(
            Self.token(
                Self.plan("GET http://gis.example.com/arcgis/rest HTTP/1.1\nHost: gis.example.com\n\n", store: scoped))
                == "none")
        #expect(
            Self.token(
                Self.plan("GET http://hdr.example.com/arcgis/rest HTTP/1.1\nHost: hdr.example.com\n\n", store: scoped))
                == "hdr header")
    }

    @Test func webSocketHandshakesWithANetworkCredentialAreRefused() {
        let ws =
            "GET http://%@/arcgis/ws HTTP/1.1\nHost: h\nUpgrade: websocket\nConnection: Upgrade\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\nSec-WebSocket-Version: 13\n\n"
        #expect(Self.token(Self.plan(ws.replacingOccurrences(of: "%@", with: "gis.example.com"))) == "key query")
        #expect(Self.token(Self.plan(ws.replacingOccurrences(of: "%@", with: "win.example.com"))) == "answer 501")
        // A Basic-only password is one header the own client sends: its handshake goes, with the own client.
        let basic = Self.store(
            parsing: """
                [[credential]]
                name = "geo"
                type = "password"
                username = "u"
                password = "p"
                schemes = ["basic"]
                match = ["http://geo.example.com/"]
                """)
        guard case .success(let p) = Self.plan(ws.replacingOccurrences(of: "%@", with: "geo.example.com"), store: basic)
        else {
            Issue.record("the handshake was refused")
            return
        }
        #expect(p.client == .own && p.network.passwordName == "geo" && !p.network.answersChallenges)
    }

    @Test func routesFollowTheTargetAndTheTunnel() throws {
        func route(_ line: String, tunnel: (String, String, Int)? = nil) -> RequestRoute {
            RequestPlanner.route(
                Self.head(line + "\nHost: x\n\n").target, tunnel: tunnel.map { (scheme: $0.0, host: $0.1, port: $0.2) },
                ownAuthorities: ["127.0.0.1:3128", "proxy.local:3128"])
        }
        let u = try #require(HTTPURL.parse("http://gis.example.com/arcgis/rest")).target
        #expect(route("GET /healthz HTTP/1.1") == .ownEndpoint("/healthz"))
        #expect(route("GET http://127.0.0.1:3128/proxy?x HTTP/1.1") == .ownEndpoint("/proxy?x"))
        #expect(route("GET http://proxy.local:3128/healthz HTTP/1.1") == .ownEndpoint("/healthz"))
        #expect(route("CONNECT gis.example.com:443 HTTP/1.1") == .tunnel(host: "gis.example.com", port: 443))
        #expect(route("GET http://gis.example.com/arcgis/rest HTTP/1.1") == .forward(u))
        // Inside a tunnel the proxy serves: every request goes to the tunnel's host.
        let inside = ("https", "gis.example.com", 443)
        let https = try #require(HTTPURL.parse("https://gis.example.com/arcgis/rest")).target
        #expect(route("GET /arcgis/rest HTTP/1.1", tunnel: inside) == .forward(https))
        #expect(route("GET https://gis.example.com/arcgis/rest HTTP/1.1", tunnel: inside) == .forward(https))
        #expect(
            route("OPTIONS * HTTP/1.1", tunnel: inside)
                == .forward(try #require(HTTPURL.parse("https://gis.example.com/")).target))
        guard case .refuse(let e) = route("GET https://other.example.com/x HTTP/1.1", tunnel: inside) else {
            Issue.record("a request for another host went through the tunnel")
            return
        }
        #expect(e.status == 400)
        #expect(
            route("GET /x HTTP/1.1", tunnel: ("http", "ws.example.com", 8080))
                == .forward(try #require(HTTPURL.parse("http://ws.example.com:8080/x")).target))
    }

    @Test func connectsFollowPortsMatchingAndThePolicy() {
        func decide(_ host: String, _ port: Int, unmatched: UnmatchedPolicy = .relay, ports: Set<Int> = [443]) -> String
        {
            switch RequestPlanner.connect(
                host: host, port: port, store: Self.store, connectPorts: ports, unmatched: unmatched, routing: nil,
                denyDestinations: [])
            {
            case .refuse(let e, let reason): return "\(e.status) \(reason.rawValue)"
            case .serve(let blind): return blind ? "serve, blind allowed" : "serve"
            case .blind(let route): return route == .direct ? "blind" : "blind, \(route)"
            }
        }
        #expect(decide("elsewhere.example.com", 443) == "blind")
        #expect(decide("elsewhere.example.com", 8443) == "403 connect_port")
        #expect(decide("elsewhere.example.com", 443, unmatched: .deny) == "403 unmatched")
        // A matched host: served on any port (Python websockets tunnels plain ws:// through CONNECT).
        #expect(decide("gis.example.com", 80) == "serve")
        #expect(decide("win.example.com", 80, unmatched: .deny) == "serve")
        #expect(decide("gis.example.com", 80, ports: [80, 443]) == "serve, blind allowed")
        // The credential is for port 80: the same host on 443 is not matched.
        #expect(decide("gis.example.com", 443) == "blind")
    }

    /// `intercept = false` on a credential, or `[tls] no_intercept`, keeps a matched host a blind tunnel (a
    /// Windows login bound to the server certificate cannot pass through interception), on `connect_ports` only.
    @Test func hostsKeptOutOfInterceptionAreBlindTunnels() throws {
        let store = CredentialStore(
            try ConfigLoader(environment: [:]).parse(
                """
                [[credential]]
                name = "portal"
                type = "api-key"
                key = "K"
                match = ["https://iis.corp/portal", "https://gis.corp/arcgis", "https://*.farm.corp/"]

                [[credential]]
                name = "windows"
                type = "password"
                username = "u"
                password = "p"
                intercept = false
                match = ["https://iis.corp/", "http://plain.corp:8080/"]

                [[credential]]
                name = "other"
                type = "api-key"
                key = "O"
                match = ["https://other.corp:8443/"]
                """
            ).credentials)
        let noIntercept = [
            HostPattern.parse("gis.corp")!, HostPattern.parse("*.farm.corp:443")!,
            HostPattern.parse("other.corp:9443")!,
        ]
        let rows: [(host: String, port: Int, ports: Set<Int>, unmatched: UnmatchedPolicy, expected: String)] = [
            // Another credential would intercept it: intercept = false on the password credential wins.
            ("iis.corp", 443, [443], .relay, "blind"),
            ("iis.corp", 443, [443], .deny, "blind"),
            // Blind only where connect_ports allows a blind tunnel.
            ("plain.corp", 8080, [443], .relay, "403 connect_port"),
            ("plain.corp", 8080, [443, 8080], .relay, "blind"),
            // [tls] no_intercept: a host on every port, a *.domain on one port, a host:port.
            ("gis.corp", 443, [443], .relay, "blind"),
            ("a.farm.corp", 443, [443], .relay, "blind"),
            // The list names port 9443: 8443 is served (intercepted) as before.
            ("other.corp", 8443, [443, 8443], .relay, "serve, blind allowed"),
            ("other.corp", 8443, [443], .relay, "serve"),
            // Not matched at all (`*.` covers subdomains only): blind as any unmatched host.
            ("farm.corp", 443, [443], .relay, "blind"),
        ]
        for r in rows {
            let got: String
            switch RequestPlanner.connect(
                host: r.host, port: r.port, store: store, connectPorts: r.ports,
                unmatched: r.unmatched, noIntercept: noIntercept, routing: nil, denyDestinations: [])
            {
            case .refuse(let e, let reason): got = "\(e.status) \(reason.rawValue)"
            case .serve(let blind): got = blind ? "serve, blind allowed" : "serve"
            case .blind(let route): got = route == .direct ? "blind" : "blind, \(route)"
            }
            #expect(got == r.expected, "\(r.host):\(r.port)")
        }
        // Without the list, the same hosts are served by the proxy.
        guard
            case .serve = RequestPlanner.connect(
                host: "gis.corp", port: 443, store: store, connectPorts: [443], unmatched: .relay, routing: nil,
                denyDestinations: [])
        else {
            Issue.record("gis.corp not served without [tls] no_intercept")
            return
        }
    }

    @Test func proxyAuthenticationIsAskedOnceAndNotOfProbesOrTunnels() throws {
        let cfg = try ConfigLoader(environment: [:]).parse(
            """
            [proxy]
            listen = ["127.0.0.1:3128"]

            [[client]]
            name = "alice"
            password = "alice-secret"
            """)
        let auth = ProxyAuthenticator(cfg.clients)
        let good = "Basic YWxpY2U6YWxpY2Utc2VjcmV0"  // alice:alice-secret
        func decide(_ line: String, _ header: String?, known: String? = nil, tunnel: Bool = false) -> String {
            let h = Self.head(line + "\nHost: x\n" + (header.map { "Proxy-Authorization: \($0)\n" } ?? "") + "\n")
            switch RequestPlanner.proxyAuthentication(h, insideTunnel: tunnel, authenticator: auth, known: known) {
            case .notNeeded: return "not needed"
            case .alreadyVerified: return "known"
            case .verified(let c, _): return "verified \(c.name)"
            case .refused(let presented, let close):
                return "407\(presented ? " presented" : "")\(close ? " close" : "")"
            }
        }
        #expect(decide("GET http://h/x HTTP/1.1", good) == "verified alice")
        #expect(decide("GET http://h/x HTTP/1.1", good, known: good) == "known")
        #expect(decide("GET http://h/x HTTP/1.1", nil) == "407")
        #expect(decide("GET http://h/x HTTP/1.1", "Basic YWxpY2U6d3Jvbmc=") == "407 presented")
        #expect(decide("CONNECT h:443 HTTP/1.1", nil) == "407 close")
        #expect(decide("GET /healthz HTTP/1.1", nil) == "not needed")
        // The PAC file is fetched before the proxy is used, so without its credentials.
        #expect(decide("GET /proxy.pac HTTP/1.1", nil) == "not needed")
        #expect(decide("HEAD /wpad.dat?x=1 HTTP/1.1", nil) == "not needed")
        #expect(decide("GET /proxy.pacx HTTP/1.1", nil) == "407")
        #expect(decide("GET http://h/proxy.pac HTTP/1.1", nil) == "407")
        #expect(decide("GET /x HTTP/1.1", nil, tunnel: true) == "not needed")
        guard
            case .notNeeded = RequestPlanner.proxyAuthentication(
                Self.head("GET http://h/ HTTP/1.1\nHost: h\n\n"),
                insideTunnel: false, authenticator: ProxyAuthenticator([]), known: nil)
        else {
            Issue.record("authentication asked for without [[client]] entries")
            return
        }
    }

    @Test func aServedTunnelIsWhatItsFirstBytesAreAndNeverARawTunnelPastConnectPorts() {
        func decide(_ c: TunnelContent, intercept: Bool = false, blind: Bool = false) -> String {
            switch RequestPlanner.servedTunnel(
                c, host: "h", port: 8080, canIntercept: intercept, blindAllowed: blind, routing: nil,
                denyDestinations: [])
            {
            case .wait: return "wait"
            case .serveHTTP: return "http"
            case .intercept: return "intercept"
            case .blind(let route): return route == .direct ? "blind" : "blind, \(route)"
            case .refuse(let e): return "\(e.status)"
            }
        }
        #expect(decide(.needMore) == "wait")
        #expect(decide(.http) == "http")
        #expect(decide(.tls, intercept: true) == "intercept")
        #expect(decide(.tls, intercept: true, blind: true) == "intercept")
        #expect(decide(.tls, blind: true) == "blind")
        #expect(decide(.tls) == "403")
        #expect(decide(.other, intercept: true, blind: true) == "400")
    }

    /// A client doing NTLM or Negotiate itself gets upstream connections of its connection's own (they are
    /// authenticated for it), and keeps them for its later requests; anything else goes over the shared pool.
    @Test(arguments: [
        ("GET http://h.example.com/x HTTP/1.1\nHost: h.example.com\nAuthorization: NTLM TlRMTVNTUAAB\n\n", false, true),
        ("GET http://h.example.com/x HTTP/1.1\nHost: h.example.com\nAuthorization: negotiate YIIB\n\n", false, true),
        ("GET http://h.example.com/x HTTP/1.1\nHost: h.example.com\nAuthorization: Basic dTpw\n\n", false, false),
        ("GET http://h.example.com/x HTTP/1.1\nHost: h.example.com\n\n", false, false),
        ("GET http://h.example.com/x HTTP/1.1\nHost: h.example.com\n\n", true, true),
    ])
    func ownConnectionsArePlanned(_ request: String, _ owns: Bool, _ expected: Bool) {
        guard case .success(let p) = Self.plan(request, store: CredentialStore([]), ownsUpstreams: owns) else {
            Issue.record("answered locally")
            return
        }
        #expect(p.ownConnections == expected)
    }
}
