import Tracing

/// The spans of one exchange on a ``ClientConnection``: the server span, and the child spans open right now (the
/// upstream attempt, the wait for a token, a replay after a rejected token, a PAC evaluation, the wait for a fleet
/// limit's permit). Exists only when
/// tracing is on (``ExchangeContext/trace``), so a proxy without tracing pays one nil check per step.
///
/// Attributes follow the OTel HTTP semantic conventions; URLs are recorded without their query string (where
/// tokens, keys and signatures travel), and no header value is ever recorded.
///
/// Confined to the loop queue of its connection.
final class ExchangeTrace {
    let tracer: ProxyTracer
    let server: ProxySpan
    private(set) var attempt: ProxySpan?
    private var attempts = 0
    private var tokenWait: ProxySpan?
    private var replay: ProxySpan?
    private var pac: ProxySpan?
    private var fleetWait: ProxySpan?
    private var ended = false

    /// A server span for request `head` from `client`, continuing the client's `traceparent` when it sent a valid
    /// one.
    init(_ tracer: ProxyTracer, head: RequestHead, client: String) {
        self.tracer = tracer
        var parent = InstrumentationContext.topLevel
        tracer.extract(head.headers, into: &parent, using: HTTPHeadersExtractor())
        server = ProxyTracing.start(
            tracer, head.method == "CONNECT" ? "CONNECT" : head.method, parent: parent, kind: .server)
        guard server.isRecording else { return }
        var a = SpanAttributeList()
        a.set("http.request.method", head.method)
        switch head.target {
        case .absolute(let u):
            a.set("url.full", Self.fullURL(u))
            a.set("url.scheme", u.scheme)
            a.set("server.address", u.host)
            a.set("server.port", u.port)
        case .authority(let host, let port):
            a.set("server.address", host)
            a.set("server.port", port)
        case .origin(let p):
            a.set("url.path", String(p.prefix { $0 != "?" }))
        }
        a.set("client.address", client)
        a.set("network.protocol.version", head.minorVersion == 1 ? "1.1" : "1.\(head.minorVersion)")
        if let ua = head.headers.first("user-agent") { a.set("user_agent.original", String(ua.prefix(256))) }
        server.setAttributes(a)
    }

    /// `url.full`: the URL without its query (where tokens, keys and signatures travel), its parts' bytes copied
    /// into the string's storage (appending five parts to a `String`, or interpolating them, costs several times
    /// more).
    static func fullURL(_ u: URLTarget) -> String {
        var scheme = u.scheme, host = u.urlHost, path = u.path
        var port = u.isDefaultPort ? "" : ":" + String(u.port)
        let n = scheme.utf8.count + 3 + host.utf8.count + port.utf8.count + path.utf8.count
        return String(unsafeUninitializedCapacity: n) { b in
            var i = 0
            func put(_ u: UnsafeBufferPointer<UInt8>) {
                guard let src = u.baseAddress else { return }
                (b.baseAddress! + i).initialize(from: src, count: u.count)
                i += u.count
            }
            scheme.withUTF8(put)
            var separator = "://"
            separator.withUTF8(put)
            host.withUTF8(put)
            port.withUTF8(put)
            path.withUTF8(put)
            return i
        }
    }

    /// Whether a request is traced: every one but liveness probes and the PAC file, which come by the thousand and
    /// tell nothing about where a request spent its time.
    static func traces(_ head: RequestHead) -> Bool {
        guard case .origin(let p) = head.target else { return true }
        let path = p.prefix { $0 != "?" }
        return path != "/healthz" && path != "/proxy.pac"
    }

    var traceIDHex: String { server.spanContext.traceID.hex }

    /// The context the exchange's child spans and token requests hang under: the replay span while a rejected
    /// token is being replaced, else the server span.
    var current: InstrumentationContext { replay?.context ?? server.context }

    // MARK: upstream attempts

    /// An upstream attempt begins: a client span whose context goes upstream in `traceparent` (and the client's
    /// `tracestate`), replacing whatever the client sent. A replay after a rejected token ends here.
    func beginAttempt(
        method: String, url: URLTarget, client: UpstreamClient, retryCause: String?, route: ParentRoute?,
        fields: inout HTTPHeaders
    ) {
        endAttempt(status: nil, error: "superseded")
        endReplay()
        attempts += 1
        let span = ProxyTracing.start(tracer, method, parent: server.context, kind: .client)
        tracer.inject(span.context, into: &fields, using: HTTPHeadersInjector())
        if span.spanContext.traceState == nil {
            // A trace the proxy began (the client sent no valid traceparent): the client's tracestate belonged to
            // another trace and does not go with this one.
            fields.remove(name: "tracestate")
        }
        attempt = span
        guard span.isRecording else { return }
        var a = SpanAttributeList()
        a.set("http.request.method", method)
        a.set("url.full", Self.fullURL(url))
        a.set("server.address", url.host)
        a.set("server.port", url.port)
        a.set("authproxy.upstream.client", client == .own ? "own" : "libcurl")
        if attempts > 1 { a.set("http.request.resend_count", attempts - 1) }
        if let retryCause { a.set("authproxy.retry.cause", retryCause) }
        if let route {
            // The parents the attempt may go through, in order (addresses only); the exchange with each one tried
            // is a child span (``ParentConnectSpan``), from the ``Connector`` or the ``CurlTransfer``.
            a.set("authproxy.route.parents", .strings(route.candidates.map { "\($0.host):\($0.port)" }))
        }
        span.setAttributes(a)
    }

    /// The attempt ended: with the upstream's status (0: none) or an error (`error.type`).
    func endAttempt(status: Int?, error: String?, tokenRejected: Bool = false) {
        guard let span = attempt else { return }
        attempt = nil
        if span.isRecording {
            if let status, status > 0 { span.setAttribute("http.response.status_code", status) }
            if tokenRejected { span.setAttribute("authproxy.token.rejected", true) }
            if let error {
                span.setAttribute("error.type", error)
                span.setStatus(.init(code: .error))
            } else if let status, status >= 500 {
                span.setAttribute("error.type", "\(status)")
                span.setStatus(.init(code: .error))
            }
        }
        span.end()
    }

    /// `error.type` for a failed transfer: the kind of failure, never its message (which may name more than a host).
    static func errorType(_ e: UpstreamError) -> String {
        if e.parent != nil { return "parent_proxy" }
        switch e.cause {
        case .dns: return "dns"
        case .connect: return "connect"
        case .timeout: return "timeout"
        case .nothing: return "empty_response"
        case .reset: return "reset"
        case .partial: return "partial_response"
        case .untrustedCertificate: return "untrusted_certificate"
        case .pinMismatch: return "pin_mismatch"
        case .tlsHandshake: return "tls_handshake"
        case .protocolError: return "protocol_error"
        case .clientGone: return "client_closed"
        case .requestBody: return "request_body"
        case .other: return "other"
        }
    }

    // MARK: tokens

    /// Waiting for a token of `credential` begins; its source is told by the token service (``TokenTrace``).
    func beginTokenWait(credential: String, layer: String) -> TokenTrace {
        tokenWait?.end()
        let span = ProxyTracing.start(tracer, "token wait", parent: current)
        if span.isRecording {
            span.setAttribute("authproxy.credential", credential)
            span.setAttribute("authproxy.token.layer", layer)
        }
        tokenWait = span
        return TokenTrace(tracer: tracer, parent: span)
    }

    /// The token came (or the exchange could not get one: `error`).
    func endTokenWait(_ trace: TokenTrace?, error: String?) {
        guard let span = tokenWait else { return }
        tokenWait = nil
        if span.isRecording {
            span.setAttribute("authproxy.token.source", trace?.source ?? "cache")
            if let error {
                span.setAttribute("error.type", error)
                span.setStatus(.init(code: .error))
            }
        }
        span.end()
    }

    /// The upstream rejected the injected token and the request goes again with a fresh one: a span from the
    /// rejection to the next attempt, under which the new token is obtained.
    func beginReplay(credential: String, status: Int) {
        endAttempt(status: status, error: nil, tokenRejected: true)
        endReplay()
        let span = ProxyTracing.start(tracer, "token rejected: replay", parent: server.context)
        if span.isRecording {
            span.setAttribute("authproxy.credential", credential)
            span.setAttribute("http.response.status_code", status)
        }
        replay = span
    }

    private func endReplay() {
        replay?.end()
        replay = nil
    }

    // MARK: routing

    /// The PAC file is asked for the route.
    func beginPac(host: String) {
        pac?.end()
        let span = ProxyTracing.start(tracer, "PAC evaluation", parent: server.context)
        if span.isRecording { span.setAttribute("server.address", host) }
        pac = span
    }

    func endPac() {
        pac?.end()
        pac = nil
    }

    // MARK: limits

    /// The exchange waits for a permit of a limit the fleet counts in Redis (`rate_limit` with
    /// `scope = "credential"`, or `daily_quota`, under `[cluster]`): this replica had none left and leases more.
    /// `kind`: `rate` or `daily_quota`.
    func beginFleetWait(credential: String, kind: String) {
        fleetWait?.end()
        let span = ProxyTracing.start(tracer, "fleet limit wait", parent: server.context)
        if span.isRecording {
            span.setAttribute("authproxy.credential", credential)
            span.setAttribute("authproxy.fleet_limit.kind", kind)
            span.setAttribute("db.system", "redis")
        }
        fleetWait = span
    }

    /// The permit came or was refused. `outcome`: `granted` (the fleet's count had room), `limited` (used up),
    /// `fallback` (Redis could not be used: this replica's share decided; `allowed` says how).
    func endFleetWait(outcome: String, allowed: Bool) {
        guard let span = fleetWait else { return }
        fleetWait = nil
        if span.isRecording {
            span.setAttribute("authproxy.fleet_limit.outcome", outcome)
            span.setAttribute("authproxy.fleet_limit.allowed", allowed)
        }
        span.end()
    }

    // MARK: the end

    /// The exchange ended with `status` (0: none sent) and `credential` applied: every open span ends.
    func finish(status: Int, credential: String?) {
        guard !ended else { return }
        ended = true
        endAttempt(status: nil, error: status == 499 ? "client_closed" : "cancelled")
        endTokenWait(nil, error: "cancelled")
        endReplay()
        endPac()
        if let span = fleetWait {
            fleetWait = nil
            if span.isRecording {
                span.setAttribute("error.type", "cancelled")
                span.setStatus(.init(code: .error))
            }
            span.end()
        }
        if server.isRecording {
            if status > 0 { server.setAttribute("http.response.status_code", status) }
            if let credential { server.setAttribute("authproxy.credential", credential) }
            if status >= 500 {
                server.setAttribute("error.type", "\(status)")
                server.setStatus(.init(code: .error))
            }
        }
        server.end()
    }
}

/// What an exchange waiting for a token hands to the token service: the wait span's context (a token request the
/// wait starts hangs under it and carries its `traceparent`), and what the service tells back: whether the exchange
/// started the token request itself, waited for one in flight (single flight), or got an answer at once.
///
/// Written on the token service's queue, read on the exchange's loop after the answer came through that queue
/// (the hop orders the accesses).
final class TokenTrace: @unchecked Sendable {
    /// The exchange's token trace while the token service decides for it (bound on the service's queue for the
    /// length of that synchronous call, so the service's signatures need not carry it through every layer).
    @TaskLocal static var current: TokenTrace?

    /// Runs `body` with `trace` bound as ``current``; without one (tracing off, or a request not traced) nothing is
    /// bound, so a proxy without tracing pays nothing here.
    static func bound(_ trace: TokenTrace?, _ body: () -> Void) {
        guard let trace else { return body() }
        $current.withValue(trace, operation: body)
    }

    let tracer: ProxyTracer
    let parent: ProxySpan
    /// `own_fetch`, `single_flight`, `cache`, or `backoff` (a failure answered at once).
    var source: String? = nil

    init(tracer: ProxyTracer, parent: ProxySpan) {
        self.tracer = tracer
        self.parent = parent
    }
}
