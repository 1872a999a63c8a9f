/// Decides what happens to a request the proxy forwards, without I/O: which URL it goes to, which credentials
/// apply and where a token goes, or the local answer that replaces it. ``ClientConnection/forward(_:)`` carries the
/// plan out (rate limits, bodies, tokens and transfers are the executor's). Every routing rule the documentation states
/// for forwarded requests lives here, with a table of unit tests.
enum RequestPlanner {
    /// What the plan depends on besides the request and the credentials in scope.
    struct Settings: Equatable {
        var unmatched: UnmatchedPolicy
        var maxReplayBytes: Int64
        /// The parent proxies and `no_proxy` (nil: none configured).
        var routing: ParentRouting? = nil
        var denyDestinations: [AddressBlock] = []
        /// This process's `Via` value, when a request could come back to it (a parent is configured).
        var ownVia: String? = nil
        /// `[proxy] http_client`.
        var httpClient: HTTPClientChoice = .native
        /// The client connection already has upstream connections of its own (``ForwardPlan/ownConnections``).
        var ownsUpstreams = false
    }

    /// The first decision about a request, from its target: inside a tunnel the proxy serves (`tunnel`: its
    /// scheme, host and port) every request goes to the tunnel's host, an origin-form one as a URL there and an
    /// absolute one only if it names that host; elsewhere an origin-form target is one of the proxy's own
    /// endpoints, as is an absolute `http://` one naming the proxy itself (`ownAuthorities`, `host:port`), an
    /// authority one is a CONNECT, and any other absolute one is forwarded.
    static func route(
        _ target: RequestTarget, tunnel: (scheme: String, host: String, port: Int)?,
        ownAuthorities: Set<String>
    ) -> RequestRoute {
        if let t = tunnel {
            switch target {
            case .origin(let path):
                return .forward(
                    URLTarget(scheme: t.scheme, host: t.host, port: t.port, pathAndQuery: path == "*" ? "/" : path))
            case .absolute(let u) where u.scheme == t.scheme && u.host == t.host && u.port == t.port:
                return .forward(u)
            default:
                return .refuse(
                    ErrorResponse(
                        status: 400, message: "Requests inside a tunnel to \(t.host):\(t.port) must be for that host"))
            }
        }
        switch target {
        case .origin(let path):
            return .ownEndpoint(path)
        case .authority(let host, let port):
            return .tunnel(host: host, port: port)
        case .absolute(let url):
            if url.scheme == "http", ownAuthorities.contains("\(url.urlHost):\(url.port)") {
                return .ownEndpoint(url.pathAndQuery)
            }
            return .forward(url)
        }
    }

    /// Proxy authentication: `known` is the `Proxy-Authorization` value the connection's last request verified.
    static func proxyAuthentication(
        _ h: RequestHead, insideTunnel: Bool, authenticator: ProxyAuthenticator,
        known: String?, webApps: WebAppDirectory = WebAppDirectory([])
    ) -> ProxyAuthDecision {
        guard authenticator.isRequired, !insideTunnel else { return .notNeeded }
        // Liveness probes, and the PAC file: clients fetch it before they use the proxy, without its credentials.
        if case .origin(let p) = h.target, p.prefix(while: { $0 != "?" }) == "/healthz" || PacEndpoint.isPacTarget(p) {
            return .notNeeded
        }
        // A browser cannot send Proxy-Authorization: an [[app]]'s `/proxy` requests are guarded by the app (its
        // origin, its credentials alone, its sign-in) instead.
        if !webApps.isEmpty, case .origin(let p) = h.target, p.prefix(while: { $0 != "?" }) == "/proxy",
            let o = proxyEndpointOrigin(h), webApps.app(forOrigin: o) != nil
        {
            return .notNeeded
        }
        let presented = h.headers.first("proxy-authorization")
        if let presented, presented == known { return .alreadyVerified }
        if let presented, let c = authenticator.authenticate(presented) {
            return .verified(c, authorization: presented)
        }
        var close = false
        if case .authority = h.target { close = true }
        return .refused(presented: presented != nil, close: close)
    }

    /// A CONNECT: a host:port a credential matches may be reached on any port, since what goes through is what the
    /// proxy serves itself (its first bytes decide), never a raw tunnel past `connect_ports`; other hosts only on
    /// the ports `connect_ports` lists, and not at all under `unmatched = "deny"`. A matched host:port that a
    /// credential's `intercept = false` or `[tls] no_intercept` (`noIntercept`) covers is a blind tunnel instead,
    /// so only on a `connect_ports` port: a Windows login bound to the server's certificate (IIS Extended
    /// Protection) fails against any certificate the proxy would present. A blind tunnel comes with its route
    /// (``tunnelRoute(host:port:routing:denyDestinations:)``).
    static func connect(
        host: String, port: Int, store: CredentialStore, connectPorts: Set<Int>,
        unmatched: UnmatchedPolicy, noIntercept: [HostPattern] = [], routing: ParentRouting?,
        denyDestinations: [AddressBlock]
    ) -> ConnectDecision {
        let matched = store.matchesHost(host, port: port)
        let portAllowed = connectPorts.contains(port)
        guard portAllowed || matched else {
            return .refuse(
                ErrorResponse(
                    status: 403, message: "CONNECT to \(host):\(port) is not allowed",
                    details: [
                        "Port \(port) is not in [proxy] connect_ports (\(connectPorts.sorted().map(String.init).joined(separator: ", ")))."
                    ]),
                denied: .connectPort)
        }
        if matched {
            let blindByChoice =
                store.declinesInterception(host, port: port)
                || noIntercept.contains { $0.matches(host: host, port: port) }
            guard blindByChoice else { return .serve(blindAllowed: portAllowed) }
            guard portAllowed else {
                return .refuse(
                    ErrorResponse(
                        status: 403, message: "CONNECT to \(host):\(port) is not allowed",
                        details: [
                            "It is kept a blind tunnel (intercept = false or [tls] no_intercept), and port \(port) is not in [proxy] connect_ports."
                        ]),
                    denied: .connectPort)
            }
            return .blind(tunnelRoute(host: host, port: port, routing: routing, denyDestinations: denyDestinations))
        }
        if unmatched == .deny {
            return .refuse(
                ErrorResponse(
                    status: 403, message: "Destination \(host):\(port) is not allowed",
                    details: ["No credential matches it and [proxy] unmatched = \"deny\"."]), denied: .unmatched)
        }
        return .blind(tunnelRoute(host: host, port: port, routing: routing, denyDestinations: denyDestinations))
    }

    /// The route of a blind tunnel to `host:port`, on the rules of ``ForwardPlan/parentRoute``: `no_proxy` first,
    /// then the configured parents or the PAC file's answer, asked about `https://host:port/`. Through a parent,
    /// `deny_destinations` can only be checked here, on an address literal: the parent resolves names itself.
    static func tunnelRoute(host: String, port: Int, routing: ParentRouting?, denyDestinations: [AddressBlock])
        -> TunnelRoute
    {
        guard let routing else { return .direct }
        switch routing.lookup(scheme: "https", host: host, port: port) {
        case .ready(nil):
            return .direct
        case .ready(let route?):
            if let refusal = deniedLiteral(
                URLTarget(scheme: "https", host: host, port: port, pathAndQuery: "/"), deny: denyDestinations)
            {
                return .refused(refusal)
            }
            return .parents(route)
        case .pending:
            return .pending(routing)
        case .refused(let e):
            return .refused(e)
        }
    }

    /// A CONNECT to a matched host carries only what the proxy serves itself: its first bytes (`content`) decide.
    /// TLS is intercepted when it can be, else relayed blindly only where `connect_ports` allows a blind tunnel
    /// anyway; anything but TLS or HTTP is refused, so a matched host never becomes a raw tunnel past
    /// `connect_ports`. TLS relayed blindly comes with its route
    /// (``tunnelRoute(host:port:routing:denyDestinations:)``).
    static func servedTunnel(
        _ content: TunnelContent, host: String, port: Int, canIntercept: Bool, blindAllowed: Bool,
        routing: ParentRouting?, denyDestinations: [AddressBlock]
    ) -> ServedTunnelDecision {
        switch content {
        case .needMore: return .wait
        case .http: return .serveHTTP
        case .tls:
            if canIntercept { return .intercept }
            if blindAllowed {
                return .blind(tunnelRoute(host: host, port: port, routing: routing, denyDestinations: denyDestinations))
            }
            return .refuse(
                ErrorResponse(
                    status: 403, message: "TLS to \(host):\(port) cannot be relayed",
                    details: ["Port \(port) is not in [proxy] connect_ports and there is no [tls] interception."]))
        case .other:
            return .refuse(
                ErrorResponse(
                    status: 400, message: "Bad request: the tunnel to \(host):\(port) carries neither TLS nor HTTP",
                    details: ["A CONNECT to a host with credentials may carry TLS or HTTP requests only."]))
        }
    }

    /// Fills `plan` (made with ``ForwardPlan/init(url:)``) for the request, or returns the answer that replaces it.
    /// In place rather than returned: the plan is large (URLs, network credentials), and copying it through a
    /// `Result` showed in the relay's instruction count.
    static func plan(
        _ h: RequestHead, url: URLTarget, store: CredentialStore, settings: Settings,
        into plan: inout ForwardPlan
    ) -> PlannedAnswer? {
        if let via = settings.ownVia, let loop = loopAnswer(h.headers, ownVia: via) { return loop }
        // Credentials are matched on the path the server will resolve: `/arcgis/%2e%2e/x` must not carry the
        // `/arcgis` token. The path goes upstream as written, and a front end may route on that raw text, so
        // when the two differ a credential applies only if both select it (`raw` is set then).
        var raw: URLTarget? = nil
        if !store.isEmpty {
            switch PathNormalizer.normalize(url.path) {
            case .normal(let p):
                if p != url.path {
                    plan.clientMatch = url.replacingPath(p)
                    plan.upstreamMatch = plan.clientMatch
                    raw = url
                }
            case .ambiguous(let why):
                if store.matchesOrigin(url) {
                    return PlannedAnswer(
                        error: ErrorResponse(
                            status: 400, message: "Bad request: \(why)",
                            details: [
                                "Requests to a host with credentials need an unambiguous path: a server could resolve this one outside the credential's prefix."
                            ]))
                }
            }
            if h.method == "TRACE", store.matchesOrigin(url) {
                // A server that answers TRACE echoes the request it got: the key or token the proxy put in.
                return PlannedAnswer(
                    error: ErrorResponse(
                        status: 405, message: "TRACE is not allowed to a host with credentials",
                        details: ["The server would echo the credentials the proxy adds to the request."]),
                    extraHeaders: "Allow: GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS\r\n")
            }
        }
        if url.scheme == "http", store.upgradesToHTTPS(plan.clientMatch) {
            // upgrade_to_https: the client speaks plain http to us, we speak https upstream.
            let port = url.port == 80 ? 443 : url.port
            plan.upstreamURL = URLTarget(scheme: "https", host: url.host, port: port, pathAndQuery: url.pathAndQuery)
            plan.upgradedToHTTPS = true
            plan.upstreamMatch = URLTarget(
                scheme: "https", host: url.host, port: port, pathAndQuery: plan.clientMatch.pathAndQuery)
        }
        if !store.isEmpty {
            plan.network = Self.network(store, plan.upstreamMatch, plan.clientMatch)
            if let raw { plan.network = plan.network.keepingShared(with: Self.network(store, plan.upstreamURL, raw)) }
            if plan.network.password != nil || plan.network.kerberos != nil,
                ConnectionBoundAuthentication.clientAuthenticates(h.headers)
            {
                // The client logs in itself: its header goes upstream as it is, and the proxy's password or
                // Kerberos credential stays out of this request (TLS settings, server trust and a client
                // certificate still apply).
                plan.network.password = nil
                plan.network.passwordName = nil
                plan.network.kerberos = nil
            }
        }
        if let routing = settings.routing {
            switch routing.lookup(
                scheme: plan.upstreamURL.scheme, host: plan.upstreamURL.host, port: plan.upstreamURL.port)
            {
            case .ready(let route):
                plan.parentRoute = route
            case .pending:
                // The PAC file is to be asked first (off the loop); the executor plans again with its answer.
                plan.routePending = true
                return nil
            case .refused(let e):
                return PlannedAnswer(error: e)
            }
            if plan.parentRoute != nil, let refusal = deniedLiteral(plan.upstreamURL, deny: settings.denyDestinations) {
                return PlannedAnswer(error: refusal)
            }
        }
        if h.upgrade != nil,
            let refusal = webSocketRefusal(network: plan.network)
        {
            return PlannedAnswer(error: refusal)
        }
        plan.client = UpstreamClient.choose(
            configured: settings.httpClient, network: plan.network, route: plan.parentRoute,
            upstreamScheme: plan.upstreamURL.scheme, isUpgrade: h.upgrade != nil)
        plan.ownConnections = settings.ownsUpstreams || ConnectionBoundAuthentication.starts(h.headers)
        let hasBody = h.framing != .none && h.framing != .contentLength(0) && h.method != "HEAD"
        // A copy of the body so it can be sent again: when a kept-alive upstream connection turns out dead (first
        // MiB), or for multi-round-trip authentication (NTLM, Digest, Negotiate), up to max_replay_bytes.
        if hasBody {
            plan.replayLimit =
                plan.network.answersChallenges ? settings.maxReplayBytes : Int64(ReplayBuffer.memoryLimit)
        }
        let match = plan.clientMatch
        let bodyLength: Int64? =
            switch h.framing {
            case .none: nil
            case .contentLength(let n): n
            case .chunked: -1
            }
        var view = RequestView(
            method: h.method, target: match, fields: h.headers, bodyLength: hasBody ? bodyLength : nil,
            isUpgrade: h.upgrade != nil)
        if !store.printServices.isEmpty, h.upgrade == nil,
            let print = PrintRequest.decide(
                method: h.method, target: match, isForm: view.isForm, bodyLength: view.bodyLength,
                services: store.printServices)
        {
            plan.print = print
            // The web map is rewritten in the form: held whole (bounded by PrintRequest.maxBodyBytes).
            if case .rewrite(let p) = print, p.carrier == .form { plan.holdsBody = true }
        }
        // A gateway credential (an identity-aware proxy in front of the service) applies whatever the service
        // credential is (the client cannot know its token); on the same rule as the others when the raw path selects
        // differently.
        if let g = store.gatewayCredential(for: match),
            raw.map({ store.gatewayCredential(for: $0)?.name == g.name }) ?? true
        {
            plan.gateway = g
            // A body is replayed after the gateway's rejection.
            if g.retriesRejections, hasBody { plan.replayLimit = settings.maxReplayBytes }
            if g.kind.tokenSource != .none, g.kind.occupies.contains("authorization"), plan.network.logsIn {
                return Self.authorizationClash(
                    gateway: g.name,
                    service: plan.network.passwordName.map { "'\($0)'" } ?? "the Kerberos credential")
            }
        }
        var selected = store.tokenCredential(for: match)
        if let raw, let s = selected, store.tokenCredential(for: raw)?.name != s.name { selected = nil }
        guard let c = selected else {
            if settings.unmatched == .deny, !store.matchesAny(match) {
                return PlannedAnswer(
                    error: ErrorResponse(
                        status: 403, message: "Destination \(url.origin) is not allowed",
                        details: ["No credential matches it and [proxy] unmatched = \"deny\"."]), denied: .unmatched)
            }
            return nil
        }
        view.placement = c.placement
        let prepared = c.kind.prepare(view)
        // The kind does not apply here (an ArcGIS token outside the ArcGIS APIs), or the client authenticates itself:
        // its credential is left alone and not retried.
        guard prepared.applies, !prepared.clientHasOwn || c.overrideClientToken else { return nil }
        if let g = plan.gateway, g.kind.tokenSource != .none,
            let clash = g.kind.occupies.first(where: c.kind.occupies.contains)
        {
            // A gateway's static fields win a name both set (the gateway is met first); a token cannot share its
            // place with the service's.
            return clash == "authorization"
                ? Self.authorizationClash(gateway: g.name, service: "'\(c.name)'")
                : PlannedAnswer(
                    error: ErrorResponse(
                        status: 502,
                        message:
                            "Credentials '\(g.name)' (gateway) and '\(c.name)' both put their token in the \(clash.hasPrefix("?") ? "\(clash.dropFirst()) parameter" : "\(clash) field")",
                        details: ["Set token_placement on one of them to another place."]))
        }
        plan.service = c
        if let limit = prepared.holdsBodyUpTo, case .contentLength(let n) = h.framing, n <= Int64(limit) {
            plan.holdsBody = true
        } else if c.retriesRejections, hasBody {
            // A rejected token is retried (refreshed, or an API key's other slot) with the body sent again, up to
            // max_replay_bytes.
            plan.replayLimit = settings.maxReplayBytes
        }
        return nil
    }

    /// 508 for a request that already went through this process (its `Via` names it): a parent proxy or PAC
    /// file that sends requests back to the proxy would otherwise loop until the connections run out.
    static func loopAnswer(_ headers: HTTPHeaders, ownVia: String) -> PlannedAnswer? {
        // The received-by part ("authproxy-<id>"), whatever protocol version precedes it.
        let me = ownVia.split(separator: " ").last.map(String.init) ?? ownVia
        for f in headers.fields where f.name.caseInsensitiveEquals("via") {
            for hop in f.value.split(separator: ",") {
                let parts = hop.split(separator: " ", omittingEmptySubsequences: true)
                if parts.count >= 2, parts[1] == me {
                    return PlannedAnswer(
                        error: ErrorResponse(
                            status: 508, message: "Loop detected: this request already went through this proxy",
                            details: [
                                "Its Via header names this authproxy (\(me)): a parent proxy or PAC file sends requests back to it. Add the destination to [proxy] no_proxy or fix the parent's configuration."
                            ]))
                }
            }
        }
        return nil
    }

    /// Through a parent the proxy never connects to the destination itself, so `deny_destinations` is checked
    /// here on an IP-literal host (a name is resolved by the parent, often on a network whose names do not
    /// resolve here).
    static func deniedLiteral(_ url: URLTarget, deny: [AddressBlock]) -> ErrorResponse? {
        guard !deny.isEmpty, let ip = IPAddress.parse(url.host), DestinationFilter.refuses(ip, deny: deny) else {
            return nil
        }
        return ErrorResponse(
            status: 403, message: "Destination \(url.origin) is not allowed",
            details: ["\(ip) is in [proxy] deny_destinations."])
    }

    /// A request carries one `Authorization` field: a gateway's bearer token and the service's own use of it (a
    /// bearer token, a header credential's field, a password or Kerberos login) cannot both go in, and either
    /// server would read the other's value.
    /// `service` is named as it reads in the message (a quoted credential name, or "the Kerberos credential").
    static func authorizationClash(gateway: String, service: String) -> PlannedAnswer {
        PlannedAnswer(
            error: ErrorResponse(
                status: 502,
                message:
                    "Credentials '\(gateway)' (gateway) and \(service) both need this request's Authorization header",
                details: [
                    "Set token_placement = \"query\" on the gateway credential, or keep the service's credential off the Authorization header."
                ]))
    }

    /// Why a WebSocket handshake cannot be relayed, nil when it can: only the own HTTP/1.1 client hands its
    /// connection over after a `101`, so no login that needs libcurl (NTLM, Negotiate). Basic and Digest are the
    /// own client's and apply.
    static func webSocketRefusal(network: NetworkAuth) -> ErrorResponse? {
        // NTLM and Negotiate bind to libcurl's connection, which cannot be handed over after a 101; Basic and Digest
        // are answered by the own client, which can.
        if network.needsLibcurl {
            return ErrorResponse(
                status: 501,
                message:
                    "WebSocket to a host with an NTLM or Kerberos login is not supported",
                details: [
                    "Token, API-key, client-certificate and password credentials whose schemes are Basic and/or Digest apply to WebSocket handshakes."
                ])
        }
        return nil
    }

    /// The network credentials for the upstream URL, completed by those written for the client's URL (under
    /// upgrade_to_https a credential may name either).
    private static func network(_ store: CredentialStore, _ upstream: URLTarget, _ client: URLTarget) -> NetworkAuth {
        var n = store.network(for: upstream)
        if upstream != client { n.fill(from: store.network(for: client)) }
        return n
    }
}
