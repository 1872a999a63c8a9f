import Dispatch

#if canImport(Glibc)
    import Glibc
#endif

/// The one way the proxy connects to an upstream for its own HTTP/1.1 client (``HTTP1Transfer``) and for tunnels and
/// WebSockets (``Tunnel``): it turns a destination, its route (direct, a parent list, a PAC answer still to come),
/// TLS and its trust settings into a connected ``SocketChannel``, as async-http-client's
/// `HTTPConnectionPool+Factory.makeChannel` does for direct, HTTP-proxy and SOCKS connections. It owns:
/// - the attempts and their failover, decided by ``ConnectAttempts`` and recorded in the parents' ``ParentHealth``;
/// - `deny_destinations` on every address it connects to: the destination's resolved addresses, and those of a
///   parent a PAC file named (``ParentRoute/parentDeny``; configured parents are the operator's choice). The
///   ``Dialer`` checks them before any connect;
/// - the mapping of a failure to an ``UpstreamError`` (``UpstreamError/init(dial:host:port:destination:timeoutSeconds:)``),
///   from which an exchange and a tunnel make the same answer.
///
/// Each attempt is a ``Dialer`` connect; a plain connection to the destination is used as it is, anything else is
/// finished by libcurl over the dialed socket (``CurlConnector``: TLS, a parent's CONNECT and authentication) and
/// read and written through a ``CurlLink``. libcurl transfers that connect themselves (``CurlTransfer``) remain only
/// where libcurl is the point: `http_client = "libcurl"`, and network logins that live on the connection (NTLM,
/// Negotiate: ``NetworkAuth/needsLibcurl``; Digest is answered by the own client); they use ``ConnectAttempts`` too.
///
/// `timeoutSeconds` bounds each attempt (the dial, then libcurl's part in what is left of it). Confined to the
/// loop's queue. `done` is called once, unless ``cancel()`` came first.
final class Connector {
    /// A connected link: its channel has no owner yet (the caller becomes it), and the parent it goes through.
    struct Connected {
        let channel: SocketChannel
        let parent: ParentProxy?
        /// How it reaches the destination: direct, inside a CONNECT through `parent`, or to `parent` itself for
        /// requests in absolute form.
        var route: Route {
            guard let parent else { return .direct }
            return forwarding ? .forwardedBy(parent) : .parent(parent)
        }
        var forwarding = false
    }

    private let multi: CurlMulti
    /// The destination as in a URL (an IPv6 address in brackets), and as dialed.
    private let urlHost: String
    private let dialHost: String
    private let port: Int
    private let tls: Bool
    private let trust: ServerTrustSettings?
    /// A `certificate` credential's, presented in the TLS handshake to the destination.
    private let certificate: ClientCertificateSettings?
    private let timeoutSeconds: Int
    private let deny: [AddressBlock]
    /// `SO_KEEPALIVE`, for connections that will wait in a pool.
    private let keepAlive: Bool
    /// A plain `http://` request that an `http` parent gets in absolute form on the connection itself (the own
    /// client writes it), rather than inside a CONNECT many parents refuse for port 80.
    private let absoluteForm: Bool
    private var route: ParentRoute?
    private var attempts = ConnectAttempts(parents: [])
    private var dialer: Dialer?
    private var curl: CurlConnector?
    private var timer: (any DispatchSourceTimer)?
    private var done: ((Result<Connected, UpstreamError>) -> Void)?
    /// The span the connection is made for (a traced upstream attempt): each exchange with a parent proxy (its
    /// CONNECT, a 407 and the authenticated retry, all inside libcurl's CONNECT_ONLY handle) gets a child span.
    var trace: ProxySpan? = nil
    private var parentSpan: ParentConnectSpan? = nil
    /// The current attempt makes TLS to an https parent for a request in absolute form (no CONNECT).
    private var forwardsOverTLS = false

    init(
        multi: CurlMulti, urlHost: String, port: Int, tls: Bool, trust: ServerTrustSettings?,
        certificate: ClientCertificateSettings? = nil, timeoutSeconds: Int, denyDestinations: [AddressBlock],
        keepAlive: Bool, absoluteForm: Bool = false
    ) {
        self.multi = multi
        self.urlHost = urlHost
        dialHost = urlHost.hasPrefix("[") && urlHost.hasSuffix("]") ? String(urlHost.dropFirst().dropLast()) : urlHost
        self.port = port
        self.tls = tls
        self.trust = tls ? trust : nil
        self.certificate = tls ? certificate : nil
        self.timeoutSeconds = timeoutSeconds
        deny = denyDestinations
        self.keepAlive = keepAlive
        self.absoluteForm = absoluteForm && !tls
    }

    private var destination: String { "\(urlHost):\(port)" }

    /// The parent the connection goes through so far (nil: direct, or after every parent failed).
    var parent: ParentProxy? { attempts.parent }

    /// Connects along `route`. A route still waiting for the PAC file (a tunnel's, planned with the CONNECT) is
    /// asked on the PAC engine's queue and planned again here with the answer
    /// (``RequestPlanner/tunnelRoute(host:port:routing:denyDestinations:)``); a refused one fails with its answer.
    func start(_ route: TunnelRoute, _ done: @escaping (Result<Connected, UpstreamError>) -> Void) {
        assertOnQueue(multi.queue)
        self.done = done
        follow(route)
    }

    /// The parent a request in absolute form went to refused it itself (its 407: no login, or a wrong one) before
    /// anything reached the client: recorded in its health, and the next attempt is made as after a failed
    /// connect — `done` is called again, with the next link or the failure naming the parents. `canMove`: whether
    /// the request can go again (its body, if any, rewound).
    func parentRefused(status: Int, canMove: () -> Bool, _ done: @escaping (Result<Connected, UpstreamError>) -> Void) {
        assertOnQueue(multi.queue)
        self.done = done
        let error = UpstreamError(
            cause: .other("parent refused"), detail: "", destination: destination, timeoutSeconds: timeoutSeconds)
        parentFailed(.failed(.auth, status: status), error: error, canMove: canMove)
    }

    /// Stops connecting; `done` is not called.
    func cancel() {
        assertOnQueue(multi.queue)
        done = nil
        stopAttempt()
    }

    private func follow(_ route: TunnelRoute) {
        switch route {
        case .direct:
            self.route = nil
            attempts = ConnectAttempts(route: nil)
            attempt()
        case .parents(let r):
            self.route = r
            attempts = ConnectAttempts(route: r)
            attempt()
        case .refused(let e):
            var error = UpstreamError(
                cause: .other("no route"), detail: "", destination: destination, timeoutSeconds: timeoutSeconds)
            error.routeRefusal = e
            finish(.failure(error))
        case .pending(let routing):
            let me = LoopBound(self, queue: multi.queue)
            let host = dialHost, port = port, deny = deny
            routing.evaluate(scheme: "https", host: host, port: port) {
                me.queue.async {
                    guard me.value.done != nil else { return }
                    me.value.follow(
                        RequestPlanner.tunnelRoute(host: host, port: port, routing: routing, denyDestinations: deny))
                }
            }
        }
    }

    // MARK: one attempt

    /// Dials the current attempt's parent, or the destination, with the attempt's deadline.
    private func attempt() {
        let p = attempts.parent
        if let p, let route { route.routing.health.attempted(p) }
        if let p, let trace { parentSpan = ParentConnectSpan(parent: trace, proxy: p, destination: destination) }
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(timeoutSeconds) * 1_000_000_000
        let d = Dialer(
            host: p?.host ?? dialHost, port: p?.port ?? port, deny: p == nil ? deny : (route?.parentDeny ?? []),
            queue: multi.queue, keepAlive: keepAlive)
        dialer = d
        let t = DispatchSource.makeTimerSource(queue: multi.queue)
        t.schedule(deadline: DispatchTime(uptimeNanoseconds: deadline))
        // Cancelled (on this queue) before the connector goes: the handler never runs after that.
        t.setEventHandler { [unowned self] in timedOut() }
        t.resume()
        timer = t
        // Not called after cancel() (which cancels the dialer).
        let me = LoopBound(self, queue: multi.queue)
        d.start { outcome in me.value.dialed(outcome, deadline: deadline) }
    }

    private func stopAttempt() {
        dialer?.cancel()
        dialer = nil
        curl?.cancel()
        curl = nil
        timer?.cancel()
        timer = nil
    }

    private func dialed(_ outcome: Result<SocketChannel, DialFailure>, deadline: UInt64) {
        dialer = nil
        let p = attempts.parent
        switch outcome {
        case .success(let channel) where p == nil && !tls:
            stopAttempt()
            finish(.success(Connected(channel: channel, parent: nil)))
        case .success(let channel)
        where absoluteForm && p?.scheme == .https && p.map { route?.routing.ownClientForwards(through: $0) } == true:
            // An https parent: TLS to the parent itself (libcurl's handshake and verification, as for any https
            // connection), then the request in absolute form over it, as below.
            timer?.cancel()
            timer = nil
            forwardsOverTLS = true
            startCurl(
                over: channel, urlHost: p.map { $0.host.contains(":") ? "[\($0.host)]" : $0.host } ?? urlHost,
                port: p?.port ?? port, tls: true,
                trust: route?.routing.parentTrust, certificate: nil, parent: nil, deadline: deadline)
        case .success(let channel)
        where absoluteForm && p.map { route?.routing.ownClientForwards(through: $0) } == true:
            // The request itself talks to the parent: its answer to it (a 407) is read by the client, which hands
            // it back here (``parentRefused(status:_:)``).
            stopAttempt()
            // No CONNECT: the parent span covers reaching the parent (its answer comes with the request's).
            parentSpan?.end(status: 0, error: nil)
            parentSpan = nil
            finish(.success(Connected(channel: channel, parent: p, forwarding: true)))
        case .success(let channel):
            // libcurl's part has its own connect timeout: what is left of the attempt's time.
            timer?.cancel()
            timer = nil
            forwardsOverTLS = false
            startCurl(
                over: channel, urlHost: urlHost, port: port, tls: tls, trust: trust, certificate: certificate,
                parent: p, deadline: deadline)
        case .failure(.outOfDescriptors(let e)):
            // The proxy's own shortage, not the parent's fault.
            stopAttempt()
            finish(.failure(dialError(.outOfDescriptors(e))))
        case .failure(.denied(let ip)) where p != nil:
            stopAttempt()
            parentFailed(.denied(ip), error: dialError(.denied(ip)))
        case .failure(let f):
            stopAttempt()
            if p != nil {
                parentFailed(.failed(.connect, status: 0), error: dialError(f))
            } else {
                finish(.failure(dialError(f)))
            }
        }
    }

    /// libcurl's part of the attempt over the dialed `channel` (``CurlConnector``): TLS to `urlHost` (the
    /// destination, or an https parent the request is then written to), through `parent`'s CONNECT when there is
    /// one.
    private func startCurl(
        over channel: SocketChannel, urlHost: String, port: Int, tls: Bool, trust: ServerTrustSettings?,
        certificate: ClientCertificateSettings?, parent: ParentProxy?, deadline: UInt64
    ) {
        // The socket reaches libcurl once the channel's sources are gone (libcurl makes its own).
        let c = CurlConnector(
            multi: multi, urlHost: urlHost, port: port, tls: tls, trust: trust, certificate: certificate,
            parent: parent, routing: parent == nil ? nil : route?.routing,
            timeoutSeconds: timeoutSeconds, deadline: deadline)
        curl = c
        let me = LoopBound(self, queue: multi.queue)
        let p = attempts.parent
        let host = p?.host ?? dialHost, dialedPort = p?.port ?? self.port
        channel.relinquish { fd in
            let connector = me.value
            guard connector.done != nil, connector.curl === c else {
                Glibc.close(fd)
                return
            }
            c.start(over: fd, dialedHost: host, dialedPort: dialedPort) { result in connector.curlFinished(result) }
        }
    }

    private func curlFinished(_ result: Result<CurlLink, CurlConnector.Failure>) {
        curl = nil
        stopAttempt()
        let p = attempts.parent
        switch result {
        case .success(let link):
            let channel = SocketChannel(fd: link.fd, queue: multi.queue, secure: link)
            if forwardsOverTLS {
                // TLS to an https parent: the request in absolute form goes next, and its answer (a 407) is the
                // client's to read, as over a plain connection to an http parent.
                parentSpan?.end(status: 0, error: nil)
                parentSpan = nil
                finish(.success(Connected(channel: channel, parent: p, forwarding: true)))
                return
            }
            if let p { route?.routing.health.succeeded(p) }
            parentSpan?.end(status: 200, error: nil)
            parentSpan = nil
            finish(.success(Connected(channel: channel, parent: p)))
        case .failure(let f) where forwardsOverTLS && p != nil:
            // The TLS connection to the parent failed (its certificate, or the handshake): the parent's failure.
            parentSpan?.end(status: 0, error: "tls_or_connect")
            parentSpan = nil
            parentFailed(.failed(.connect, status: 0), error: f.error)
        case .failure(let f):
            parentSpan?.end(status: f.connectStatus, error: f.parentCause.map { "\($0)" } ?? "tls_or_connect")
            parentSpan = nil
            if p != nil, let cause = f.parentCause {
                parentFailed(.failed(cause, status: f.connectStatus), error: f.error)
            } else {
                finish(.failure(f.error))
            }
        }
    }

    private func timedOut() {
        stopAttempt()
        let p = attempts.parent
        let error = dialError(.timedOut(timeoutSeconds))
        if p != nil {
            parentFailed(.failed(.timeout, status: 0), error: error)
        } else {
            finish(.failure(error))
        }
    }

    /// Records the failure at the current parent and carries out the next step: another attempt, or `error` naming
    /// the parents' failure.
    private func parentFailed(
        _ outcome: ConnectAttempts.Outcome, error: UpstreamError, canMove: () -> Bool = { true }
    ) {
        parentSpan?.end(status: 0, error: "failed")
        parentSpan = nil
        guard let route, let p = attempts.parent else { return }
        if case .failed(let cause, _) = outcome { route.routing.health.failed(p, cause: cause) }
        switch attempts.failed(outcome, canMove: canMove) {
        case .attempt:
            attempt()
        case .fail(let f):
            var e = error
            e.failedAtParents(f, pac: route.fromPac ? route.routing.config.pac?.description : nil)
            finish(.failure(e))
        }
    }

    private func dialError(_ f: DialFailure) -> UpstreamError {
        let p = attempts.parent
        return UpstreamError(
            dial: f, host: p?.host ?? dialHost, port: p?.port ?? port, destination: destination,
            timeoutSeconds: timeoutSeconds)
    }

    private func finish(_ outcome: Result<Connected, UpstreamError>) {
        parentSpan?.end(status: 0, error: "failed")
        parentSpan = nil
        let d = done
        done = nil
        d?(outcome)
    }
}
