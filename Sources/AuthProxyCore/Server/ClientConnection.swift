import CAuthProxyShims
import CCurl
import Dispatch
import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// One client connection: the executor of its ``ExchangeStateMachine``. It moves bytes between the socket, TLS,
/// the upstream clients and the token service, reports what happened to the machine, and carries out what the
/// machine decides (answer, fail, close, pause, resume, hold, retry, and when buffered input is taken up again).
/// The connection's mode is the machine's state; ``tunnel`` and ``interception`` are only that mode's resources. No
/// lifecycle decision is taken here: a failure that leaves nothing to answer (a failed TLS handshake, the end of a
/// tunnel) closes at once, and the close is reported to the machine.
///
/// Memory per connection is bounded: at most ``maxInput`` unparsed input bytes, ``maxBuffered`` request-body
/// bytes waiting for libcurl, and ``maxBuffered`` response bytes waiting for the client. When a limit is
/// reached the producer is paused (client reads suspended, or the libcurl transfer paused) until the other
/// side catches up.
///
/// What an exchange needs while it runs (request, transfer, buffers, credential) is in ``ex``, an
/// ``ExchangeContext`` from the loop's pool, attached only while an exchange runs: an idle keep-alive connection
/// holds little more than its socket, parser and state machine.
///
/// Confined to its loop's queue: every method runs there (Dispatch handlers, libcurl callbacks and token
/// answers are delivered on it; a hop to a later turn goes through ``LoopBound``, which checks it in debug builds).
final class ClientConnection: UpstreamExchangeDelegate, SocketChannelOwner {
    static let maxBuffered = 256 * 1024
    static let maxInput = 80 * 1024

    let channel: SocketChannel
    let peer: String
    /// The client's IP address (rate limits and connection limits are per address when there is no user).
    let address: IPAddress
    /// The `[[client]]` the current request authenticated as (for a TLS-intercepted tunnel: the one that
    /// opened it), with the `Proxy-Authorization` value that verified, so a keep-alive client repeating it
    /// costs no hashing; nil without proxy authentication. One reference rather than both inline (56 bytes on
    /// every connection, most of which never authenticate).
    var authenticated: AuthenticatedClient? = nil
    var client: ProxyClient? { authenticated?.client }
    /// The credentials the current client may use (its `[[client]]` scope, or all).
    var credentials: CredentialStore
    unowned let loop: EventLoop
    /// The configuration generation in force for this connection: the one the exchange in progress began with,
    /// or between exchanges the loop's current one (see ``ServerContext``).
    var context: ServerContext {
        if let c = ex?.context { return c }
        return loop.context
    }
    var logger: Logger { context.logger }
    /// The generation `credentials`, `authenticated` and the machine's limits were taken from; an exchange that
    /// begins under a newer one takes them again (``adoptGeneration(_:)``).
    var generationSeen: Int
    /// Every lifecycle decision: see ``ExchangeStateMachine``. Read and changed many times per request, always on
    /// the loop's queue and by the machine's own methods, which call nothing back: accesses cannot overlap, so
    /// they go without the dynamic exclusivity check (a measured share of the request's cost).
    @exclusivity(unchecked) var machine: ExchangeStateMachine
    var inbuf = ByteBuffer()
    var parser = RequestHeadParser()
    /// A CONNECT tunnel to a matched host that the proxy serves itself (TLS with the client when intercepted, or
    /// plain HTTP), and the host:port it was opened to (every request on it goes there); nil on a plain
    /// connection (one reference, not ~40 bytes inline).
    var interception: Interception? = nil
    var tls: TLSSession? { interception?.session }
    /// The blind CONNECT tunnel that owns the socket, if any.
    var tunnel: Tunnel? = nil
    /// The bytes and resources of the exchange in progress (its state is the machine's); nil between exchanges.
    /// Taken from the loop's pool by ``attachExchange()`` and given back by ``detachExchange()`` when the exchange
    /// ends. Code that may end the exchange (answer, finish, close) must not use a context it fetched before.
    var ex: ExchangeContext? = nil
    /// Upstream connections of this client alone, once it authenticates connections itself (NTLM/Negotiate);
    /// nil for nearly every client.
    var ownUpstreams: OwnUpstreams? = nil
    /// The first bytes the client sent have been looked at (a TLS ClientHello puts the proxy's own TLS under the
    /// channel, ``startProxyTLS(prefix:)``): later reads skip the look.
    var firstBytesSeen = false

    deinit {
        // Backstop: a transfer must never outlive the connection whose memory its callbacks use (the transfer's
        // delegate reference is `unowned(unsafe)`).
        ex?.transfer?.cancel()
        ownUpstreams?.close()
    }

    init(fd: Int32, peer: String, address: IPAddress, loop: EventLoop) {
        channel = SocketChannel(fd: fd, queue: loop.queue)
        self.peer = peer
        self.address = address
        self.loop = loop
        let g = loop.context
        credentials = g.access.all
        generationSeen = g.generation
        let cfg = g.config
        machine = ExchangeStateMachine(
            limits: .init(
                seconds: cfg.headerTimeoutSeconds, idle: cfg.idleTimeoutSeconds, upstream: cfg.upstreamTimeoutSeconds),
            now: DispatchTime.now().uptimeNanoseconds)
    }

    /// Whether the request body of the exchange in progress has been read to its end.
    var bodyComplete: Bool { machine.exchange.map { $0.request.isComplete } ?? true }

    /// The connection's one reading of the monotonic clock (every decision it passes a time to reads it here).
    var now: UInt64 { DispatchTime.now().uptimeNanoseconds }

    func start() {
        assertOnQueue(loop.queue)
        channel.owner = self
        channel.resumeReading()
    }

    func channelReadable(_ channel: SocketChannel) { readable() }
    func channelDrained(_ channel: SocketChannel) { drained() }
    func channelWriteFailed(_ channel: SocketChannel, error: Int32) { clientGone() }

    /// The context of the exchange in progress, taken from the loop's pool when there is none yet. The exchange
    /// holds the loop's current configuration generation until it ends.
    @discardableResult
    func attachExchange() -> ExchangeContext {
        if let x = ex { return x }
        let x = loop.exchangeContexts.take { ExchangeContext() }
        x.context = loop.context
        ex = x
        return x
    }

    /// The first exchange on this connection under configuration generation `g` (a reload happened since the
    /// last one): the timeouts, the client's credential scope and its proxy authentication are taken from `g`.
    /// A client admitted before is checked again against `g`'s `[[client]]` entries with the
    /// `Proxy-Authorization` it presented, so a removed client or a changed password stops working on a kept-alive
    /// connection too. Returns the refusal when `g` no longer admits the connection: its address is outside
    /// `g`'s `allow_clients` (checked at accept for new connections, here for kept-alive ones), or it is an
    /// intercepted tunnel whose client `g` no longer admits (requests inside a tunnel carry no
    /// `Proxy-Authorization` of their own). The caller answers with it and closes.
    func adoptGeneration(_ g: ServerContext) -> ErrorResponse? {
        generationSeen = g.generation
        if !g.access.allowClients.contains(address) {
            return ErrorResponse(
                status: 403, message: "Client address \(address) is not allowed",
                details: ["The configuration was reloaded and [proxy] allow_clients no longer admits it."])
        }
        let cfg = g.config
        machine.limitsChanged(
            .init(
                seconds: cfg.headerTimeoutSeconds, idle: cfg.idleTimeoutSeconds, upstream: cfg.upstreamTimeoutSeconds))
        let auth = g.access.authenticator
        if let a = authenticated {
            if auth.isRequired, let c = auth.authenticate(a.authorization) {
                authenticated = AuthenticatedClient(client: c, authorization: a.authorization)
                credentials = g.access.store(for: c)
                return nil
            }
            authenticated = nil
        }
        credentials = g.access.all
        guard interception != nil, auth.isRequired else { return nil }
        return ErrorResponse(
            status: 407, message: "Proxy authentication required",
            details: [
                "The configuration was reloaded and no longer admits the client that opened this tunnel: open a new one."
            ])
    }

    /// A reload installed `g` while this connection was open: one whose address `g` no longer admits and that
    /// has no request in progress (idle between requests, or a blind tunnel, which carries no more requests to
    /// refuse) is closed now; one with a request in progress finishes it and is refused at its next one.
    func reloadInstalled(_ g: ServerContext) {
        guard !g.access.allowClients.contains(address), machine.closesWhenNoLongerAdmitted else { return }
        logger.warning(
            "connection closed: client address no longer in [proxy] allow_clients after a reload",
            metadata: ["client": "\(peer)"])
        ProxyMetrics.active?.denied(.clientAddress)
        close()
    }

    /// The exchange has ended: its context goes back to the loop's pool, reset.
    func detachExchange() {
        guard let x = ex else { return }
        ex = nil
        if let saved = x.savedCredentials { credentials = saved }
        x.reset()
        loop.exchangeContexts.give(x)
    }

    // MARK: input

    func readable() {
        assertOnQueue(loop.queue)
        if case .tunnel = machine.state {
            tunnel?.clientReadable()
            return
        }
        var eof = false
        // Each pass reads as the machine says (``ExchangeStateMachine/ReadPass``), then processes what it read.
        var stoppedEarly = true
        while stoppedEarly {
            stoppedEarly = false
            var atLimit = false
            let pass = machine.readPass
            // Bytes of a read that found `inbuf` empty, left in the scratch buffer for `process(inPlace:)`.
            var inPlace = 0
            reading: while true {
                guard inbuf.count < Self.maxInput, (tls?.bufferedCiphertext ?? 0) < Self.maxInput else {
                    stoppedEarly = true
                    atLimit = true
                    break reading
                }
                switch channel.read(into: loop.scratch) {
                case .bytes(let n):
                    machine.clientProgress(now: now)
                    if pass == .discard { continue }
                    let bytes = UnsafeRawBufferPointer(rebasing: loop.scratch[0..<n])
                    if !firstBytesSeen {
                        firstBytesSeen = true
                        // TLS to the proxy itself: everything from here on is read through the layer.
                        if ClientHelloPrefix.isTLS(bytes) {
                            guard startProxyTLS(prefix: bytes) else { return }
                            continue
                        }
                    }
                    let short = n < loop.scratch.count && pass == .untilShortRead
                    if let tls {
                        tls.feed(bytes)
                    } else if inbuf.isEmpty, short {
                        // Everything the client sent, in one read (the usual case): parsed where it lies.
                        inPlace = n
                        stoppedEarly = true
                        break reading
                    } else {
                        inbuf.append(bytes)
                    }
                    if short {
                        stoppedEarly = true
                        break reading
                    }
                case .wouldBlock:
                    break reading
                case .eof:
                    eof = true
                    break reading
                case .error:
                    if channel.secure != nil { proxyTLSFailed() }
                    clientGone()
                    return
                }
            }
            if tls != nil, pass != .discard {
                switch pullTLS() {
                case .closed: return
                case .eof: eof = true
                case .ok: break
                }
            }
            // Requests that arrived with the EOF are still served (a client may half-close after sending).
            process(inPlace: UnsafeRawBufferPointer(rebasing: loop.scratch[0..<inPlace]))
            if eof {
                if let tls, tls.handshakeDone, !tls.receivedData { closedAfterHandshake(tls) }
                if machine.exchanges == 0, channel.secure != nil { closedAfterProxyHandshake() }
                clientEOF()
                return
            }
            stoppedEarly =
                stoppedEarly && !channel.isClosed
                && machine.readsOn(
                    atLimit: atLimit, buffered: max(inbuf.count, tls?.bufferedCiphertext ?? 0), limit: Self.maxInput)
        }
        updateReadInterest()
    }

    func updateReadInterest() {
        switch machine.readInterest(buffered: max(inbuf.count, tls?.bufferedCiphertext ?? 0), limit: Self.maxInput) {
        case .read: channel.resumeReading()
        case .pause: channel.pauseReading()
        case .leave: return
        }
        // Decrypted-but-unread input does not make the socket readable again: pull it when there is room.
        if let session = tls, session.handshakeDone, session.hasBufferedInput, inbuf.count < Self.maxInput,
            machine.decryptedInputWaiting()
        {
            onNextTurn { me in
                guard me.machine.decryptedInputTurn() else { return }
                switch me.pullTLS() {
                case .closed: return
                case .eof:
                    me.process()
                    me.clientEOF()
                case .ok:
                    me.process()
                    me.updateReadInterest()
                }
            }
        }
    }

    /// Parses and starts as many requests as the buffered input and the exchange in progress allow. `inPlace`:
    /// input that arrived after `inbuf` was emptied, still in the loop's scratch buffer; a request head in it is
    /// parsed there and only the bytes after it are copied to `inbuf`, so a client whose requests each arrive in
    /// one read never makes the connection allocate (and keep) an input buffer. Anything else copies it first.
    func process(inPlace: UnsafeRawBufferPointer = UnsafeRawBufferPointer(start: nil, count: 0)) {
        var inPlace = inPlace
        while true {
            let step = machine.nextInputStep(buffered: inPlace.isEmpty ? inbuf.count : inPlace.count, now: now)
            if !inPlace.isEmpty, step != .parseHead {
                if step != .discard { inbuf.append(inPlace) }
                inPlace = UnsafeRawBufferPointer(start: nil, count: 0)
            }
            switch step {
            case .wait, .discard:
                return
            case .classifyTunnel:
                // The first bytes inside a CONNECT to a matched host say what the tunnel carries.
                guard let ic = interception, firstTunnelBytes(ic) else { return }
            case .pumpBody:
                pumpBody()
                return
            case .parseHead:
                let result = inPlace.isEmpty ? inbuf.withUnreadBytes { parser.parse($0) } : parser.parse(inPlace)
                switch result {
                case .needMore:
                    // The parser remembers how far it scanned: `inbuf` now holds the same bytes from the start.
                    if !inPlace.isEmpty { inbuf.append(inPlace) }
                    return
                case .failed(let e):
                    parser.reset()
                    inbuf.removeAll()
                    machine.requestFailed(now: now)
                    respond(ErrorResponse.forParseError(e), close: true)
                    return
                case .complete(let h, let consumed):
                    if inPlace.isEmpty {
                        inbuf.consume(consumed)
                    } else {
                        // Whatever follows the head (body bytes, a pipelined request) must be copied before
                        // the scratch buffer is read into again.
                        if consumed < inPlace.count {
                            inbuf.append(UnsafeRawBufferPointer(rebasing: inPlace[consumed...]))
                        }
                        inPlace = UnsafeRawBufferPointer(start: nil, count: 0)
                    }
                    parser.reset()
                    begin(h)
                }
            }
        }
    }

    func begin(_ h: RequestHead) {
        assert(ex == nil, "an exchange began with the previous one's context still attached")
        let x = attachExchange()
        var hasBody = true
        switch h.framing {
        case .none, .contentLength(0):
            hasBody = false
        case .contentLength(let n):
            x.bodyRemaining = n
        case .chunked:
            x.chunkDecoder = ChunkedDecoder()
        }
        machine.requestBegan(
            .init(
                isHead: h.isHead, minorVersion: h.minorVersion, expectsContinue: h.expectsContinue,
                keepAlive: h.keepAlive, hasBody: hasBody), shuttingDown: loop.shuttingDown, now: now)
        x.head = h
        if let tracer = ProxyTracing.active, ExchangeTrace.traces(h) {
            x.trace = ExchangeTrace(tracer, head: h, client: "\(address)")
        }
        if let g = x.context, g.generation != generationSeen, let refusal = adoptGeneration(g) {
            respond(refusal, close: true)
            return
        }
        guard authorize(h) else { return }
        switch RequestPlanner.route(
            h.target, tunnel: interception.map { ($0.scheme, $0.host, $0.port) },
            ownAuthorities: context.ownAuthorities)
        {
        case .ownEndpoint(let path):
            serveOwnEndpoint(path)
        case .tunnel(let host, let port):
            if context.routing != nil, let loop = RequestPlanner.loopAnswer(h.headers, ownVia: context.viaValue) {
                respond(loop.error, close: true)
                return
            }
            startTunnel(host: host, port: port)
        case .forward(let url):
            // Inside a served tunnel the request's target becomes the URL it goes to (for the access log).
            if interception != nil { x.head?.target = .absolute(url) }
            forward(url)
        case .refuse(let e):
            respond(e, close: true)
        }
    }

    /// Proxy authentication (`[[client]]`): true when the request may go on, as `client` with its credential
    /// scope; otherwise it has been answered with 407. `/healthz` (liveness probes) and the PAC file (fetched before
    /// the proxy is used) need none, and requests inside an intercepted tunnel act for the client that opened it.
    func authorize(_ h: RequestHead) -> Bool {
        switch RequestPlanner.proxyAuthentication(
            h, insideTunnel: interception != nil, authenticator: context.access.authenticator,
            known: authenticated?.authorization, webApps: context.access.apps.directory)
        {
        case .notNeeded, .alreadyVerified:
            return true
        case .verified(let c, let presented):
            authenticated = AuthenticatedClient(client: c, authorization: presented)
            credentials = context.access.store(for: c)
            return true
        case .refused(let presented, let close):
            authenticated = nil
            if presented, let held = context.access.throttle.admit("proxy-auth", now: now) {
                logger.warning(
                    "proxy authentication failed",
                    metadata: ["client": "\(peer)", "failed_since_last_report": "\(held)"])
            }
            // A refused CONNECT closes (bytes meant for the tunnel must not be read as requests), and so does a
            // request whose body was not read (the machine's rule for every local answer).
            ProxyMetrics.active?.denied(.proxyAuthentication)
            respond(
                ErrorResponse(
                    status: 407, message: "Proxy authentication required",
                    details: [
                        "Send Proxy-Authorization: Basic with the name and password of a [[client]] of this proxy "
                            + "(curl --proxy-user, or http://name:password@host:port as the proxy URL)."
                    ]),
                close: close, extraHeaders: "Proxy-Authenticate: Basic realm=\"authproxy\"\r\n")
            return false
        }
    }

    // MARK: responses and the end of an exchange

    /// Answers the exchange from the proxy itself. `close` closes the connection afterwards (so does a request
    /// body that was not read).
    func respondLocal(status: Int, contentType: String, body: String, close: Bool = false, extraHeaders: String = "") {
        guard let keepAlive = machine.answerLocally(status: status, close: close) else { return }
        // An answer to input that was not a request (400, 408) has no context yet: it gets one for the log line.
        let x = attachExchange()
        let minor = x.head?.minorVersion ?? 1
        // A 204 has neither body nor Content-Length (RFC 9110 §8.6); a 304 has no body, and a Content-Length on it
        // would have to be the 200's (§8.6), so it has none either.
        let noBody = status == 204 || status == 304
        var s = "HTTP/1.1 \(status) \(reasonPhrase(status))\r\n"
        if !noBody { s += "Content-Type: \(contentType)\r\nContent-Length: \(body.utf8.count)\r\n" }
        s += extraHeaders
        if let o = x.corsOrigin { s += "Access-Control-Allow-Origin: \(o)\r\n" }
        if x.varyAuthorization {
            s += "Vary: Origin, Authorization\r\n"
        } else if x.corsOrigin != nil || x.varyOrigin {
            s += "Vary: Origin\r\n"
        }
        if !keepAlive { s += "Connection: close\r\n" } else if minor == 0 { s += "Connection: keep-alive\r\n" }
        s += "\r\n"
        if x.head?.isHead != true, !noBody {
            s += body
            x.bodyBytesOut = Int64(body.utf8.count)
        }
        x.heldHead.removeAll()
        send(s)
        finishExchange()
    }

    /// Answers with an ArcGIS-style JSON error.
    func respond(_ e: ErrorResponse, close: Bool, extraHeaders: String = "") {
        cancelTransfer()
        respondLocal(
            status: e.status, contentType: "application/json; charset=utf-8", body: e.jsonBody, close: close,
            extraHeaders: e.retryAfter.map { "Retry-After: \($0)\r\n" + extraHeaders } ?? extraHeaders)
    }

    // MARK: carrying out the machine's steps

    /// Stops the exchange's transfer, if any: its callbacks stop at once.
    func cancelTransfer() {
        guard let x = ex, let t = x.transfer else { return }
        t.cancel()
        x.transfer = nil
        if let trace = x.trace {
            let status = x.responseHead.status
            trace.endAttempt(status: status, error: status > 0 ? nil : "cancelled")
        }
    }

    /// Forgets what a stopped transfer produced for the client: the decided head, the held body and the scrub of
    /// its body.
    func dropResponse() {
        guard let x = ex else { return }
        x.heldHead.removeAll()
        x.sniffBuffer = []
        x.bodyScrub = nil
    }

    /// A failed exchange, as the machine decided (``ExchangeStateMachine/FailureStep``): answered with `answer`, or
    /// cut.
    func run(_ step: ExchangeStateMachine.FailureStep, answer: @autoclosure () -> ErrorResponse) {
        switch step {
        case .close:
            close()
        case .truncate:
            logAccess()
            close()
        case .answerError(let close, let then):
            dropResponse()
            respond(answer(), close: close)
            run(then)
        }
    }

    /// Takes up buffered input when and if the machine says (a request pipelined behind one answered outside
    /// ``process(inPlace:)``).
    func run(_ continuation: ExchangeStateMachine.Continuation) {
        switch continuation {
        case .none:
            return
        case .now:
            process()
            updateReadInterest()
        case .nextTurn:
            onNextTurn { me in
                me.process()
                me.updateReadInterest()
            }
        }
    }

    /// Runs `body` with this connection on a later turn of its loop, never inside the current callback.
    func onNextTurn(_ body: @escaping (ClientConnection) -> Void) {
        let hop = LoopBound((self, body), queue: loop.queue)
        loop.queue.async {
            let (me, body) = hop.value
            body(me)
        }
    }

    /// Runs `body` with this connection on its loop after `nanoseconds`.
    func onLoop(after nanoseconds: UInt64, _ body: @escaping (ClientConnection) -> Void) {
        let hop = LoopBound((self, body), queue: loop.queue)
        loop.queue.asyncAfter(deadline: .now() + .nanoseconds(Int(min(nanoseconds, UInt64(Int.max))))) {
            let (me, body) = hop.value
            body(me)
        }
    }

    /// The exchange is answered: log it, give its context back (which frees a replay spill file at once), and
    /// keep the connection or begin closing it.
    func finishExchange() {
        // A write may have failed while answering: a closed connection stays closed.
        guard machine.exchange != nil else { return }
        logAccess()
        detachExchange()
        switch machine.endExchange(shuttingDown: loop.shuttingDown, now: now) {
        case .close: beginClosing()
        case .awaitNext, .none: break
        }
    }

    /// One access-log line for the exchange in progress; `status` and `started` stand in for the machine's when
    /// the exchange is already gone from it (a client that left: 499).
    func logAccess(status: Int? = nil, started: UInt64? = nil, webSocket: Bool = false) {
        let x = ex
        if let m = ProxyMetrics.active {
            recordExchange(
                m, x, status: status ?? machine.current?.status ?? 0,
                started: started ?? machine.current?.started ?? now)
        }
        x?.trace?.finish(status: status ?? machine.current?.status ?? 0, credential: appliedCredential(x))
        guard logger.logLevel <= .info else { return }
        let method: String
        let url: String
        if let h = x?.head {
            method = h.method
            switch h.target {
            case .absolute(let u): url = "\(u.origin)\(u.path)"
            case .authority(let host, let port): url = "\(host.contains(":") ? "[\(host)]" : host):\(port)"
            case .origin(let p): url = String(p.prefix { $0 != "?" })
            }
        } else {
            method = "-"
            url = "-"
        }
        let started = started ?? machine.current?.started ?? now
        let ms = Double(now &- started) / 1_000_000
        var metadata: Logger.Metadata = [
            "client": "\(peer)", "method": "\(method)", "url": "\(url)",
            "status": "\(status ?? machine.current?.status ?? 0)",
            "bytes_in": "\(x?.bodyBytesIn ?? 0)", "bytes_out": "\(x?.bodyBytesOut ?? 0)",
            "duration_ms": "\(Double(Int(ms * 10)) / 10)", "credential": "\(appliedCredential(x) ?? "-")",
            "user": "\(client?.name ?? "-")",
        ]
        // The end of a relayed WebSocket: bytes are frames each way, the duration the socket's life.
        if webSocket { metadata["upgrade"] = "websocket" }
        // Upstream attempts, when more than one was made (``RetryPolicy``).
        if let retries = machine.current?.upstreamRetries, retries > 0 { metadata["attempts"] = "\(retries + 1)" }
        if let cause = x?.attempt?.getAsPost { metadata["get_as_post"] = "\(cause.rawValue)" }
        // The trace the exchange's spans are in (also when not sampled: the id the next hops saw).
        if let t = x?.trace { metadata["trace_id"] = "\(t.traceIDHex)" }
        logger.info("access", metadata: metadata)
    }

    /// The credential an exchange is counted and logged under: its token-type credential, the one whose
    /// rate limit refused it, else the network credential applied (password, Kerberos, client certificate).
    func appliedCredential(_ x: ExchangeContext?) -> String? {
        guard let x else { return nil }
        if x.stacksGateway, let g = x.gatewayCredential {
            // Stacked, as a header gateway's are named: the service's then the gateway's.
            return (x.credential?.name ?? x.headerCredential).map { "\($0)+\(g.name)" } ?? g.name
        }
        return x.credential?.name ?? x.headerCredential ?? x.limitedBy ?? x.networkAuth.passwordName
            ?? (x.networkAuth.kerberos != nil ? context.kerberosCredentialName : nil) ?? x.networkAuth.certificateName
    }

    /// The exchange's metrics, next to its access-log line (see ``ProxyMetrics``).
    private func recordExchange(_ m: ProxyMetrics, _ x: ExchangeContext?, status: Int, started: UInt64) {
        let credential = appliedCredential(x)
        loop.requestCounters.increment(
            credential: credential ?? MetricLabels.noCredential, method: x?.head?.method ?? "-",
            status: status, metrics: m)
        m.durationTotal.recordNanoseconds(Int64(bitPattern: now &- started))
        if let x {
            if x.bodyBytesIn > 0 { m.bytesUpstream.increment(by: x.bodyBytesIn) }
            if x.bodyBytesOut > 0 { m.bytesDownstream.increment(by: x.bodyBytesOut) }
            recordRetryOutcome(m, x, status: status)
            if let r = x.retry {
                m.retry(
                    credential: r.credential,
                    result: r.result ?? (status >= 200 && status < 500 ? "success" : "failure"))
            }
            // A handshake answered otherwise than with 101 (an upgraded one was counted at its 101).
            if x.head?.upgrade != nil, status != 101 {
                m.webSocketUpgrade(credential: credential ?? MetricLabels.noCredential, result: "refused")
            }
        }
        if let credential {
            let at = nowMillis()
            if x?.stacksGateway == true, let g = x?.gatewayCredential {
                // Each stacked credential's status counts the request under its own name.
                let service = x?.credential?.name
                m.activity.withLock { a in
                    a.request(credential: g.name, now: at)
                    if let service { a.request(credential: service, now: at) }
                }
            } else {
                m.activity.withLock { $0.request(credential: credential, now: at) }
            }
        }
    }

    /// Half-closes after the response is flushed, then discards input until the client closes or the linger
    /// time passes (the machine's closing state).
    func beginClosing() {
        inbuf.removeAll()
        if let tls {
            tls.shutdown()
            flushTLS()
        }
        channel.shutdownWriteWhenFlushed()
        channel.resumeReading()
    }

    func drained() {
        if case .tunnel = machine.state {
            machine.clientProgress(now: now)
            tunnel?.clientDrained()
            return
        }
        if machine.clientDrained(pending: channel.pendingCount, now: now) { ex?.transfer?.resume() }
    }

    func clientEOF() {
        switch machine.clientEOF(pendingOutput: channel.pendingCount) {
        case .tunnel: tunnel?.clientEOF()
        case .halfClosed, .pauseReading: channel.pauseReading()
        case .gone: clientGone()
        }
    }

    /// The client closed or reset its connection: cancel whatever is in flight.
    func clientGone() {
        let started = machine.current?.started
        switch machine.clientGone() {
        case .tunnel:
            if let t = tunnel { t.clientGone() } else { close() }
        case .close(let status):
            if let status, ex?.head != nil { logAccess(status: status, started: started) }
            close()
        }
    }

    func close() {
        guard !channel.isClosed else { return }
        let status = machine.current?.status
        machine.closed()
        if ex != nil {
            cancelTransfer()
            ex?.trace?.finish(status: status ?? 0, credential: appliedCredential(ex))
            // Dropped, not pooled: close may run inside a use of the context's buffers (a send that failed while
            // the held head was being written), where resetting them is not allowed. Closing mid-exchange is rare.
            // Its replay copy goes with it, so a spill file is freed now, not when the connection is released.
            ex = nil
        }
        tunnel?.close()
        tunnel = nil
        ownUpstreams?.close()
        ownUpstreams = nil
        channel.close()
        loop.connectionClosed(self)
    }

    /// A connection idle this long gives its buffers back; a busy keep-alive one reuses them between exchanges.
    static let trimAfter: UInt64 = 1_000_000_000

    /// Frees the input and send buffers of an idle connection (the exchange's buffers went back to the loop's
    /// pool with its context when it ended).
    func releaseIdleStorage() {
        inbuf.releaseStorage()
        channel.releaseIdleStorage()
    }

    func shutdownRequested() {
        machine.shutdownRequested(now: now)
    }

    /// The end of the grace period: whatever is still in flight ends now, with its access-log line (a request not
    /// answered yet gets a 503).
    func graceExpired() {
        let started = machine.current?.started
        switch machine.graceExpired() {
        case .close:
            close()
        case .answerUnavailable:
            respond(
                ErrorResponse(
                    status: 503, message: "authproxy is shutting down",
                    details: [
                        "The request did not finish within shutdown_grace_seconds (\(context.config.shutdownGraceSeconds) s); retry it."
                    ]),
                close: true)
            close()
        case .cut(let status):
            if ex?.head != nil { logAccess(status: status, started: started) }
            close()
        case .tunnel:
            if let t = tunnel { t.finish() } else { close() }
        }
    }

    func checkTimeouts(now: UInt64) {
        assertOnQueue(loop.queue)
        let cfg = context.config
        switch machine.tick(
            now: now, clientPending: channel.pendingCount, lastSendProgress: channel.lastSendProgress,
            clientReadsPaused: !channel.isReading)
        {
        case .none:
            if machine.isIdle(now: now, for: Self.trimAfter), inbuf.isEmpty { releaseIdleStorage() }
        case .headerTimedOut:
            machine.requestFailed(now: now)
            respond(
                ErrorResponse(status: 408, message: "Request header not received within \(cfg.headerTimeoutSeconds) s"),
                close: true)
        case .close:
            close()
        case .closeForShutdown:
            machine.closingForShutdown(now: now)
            beginClosing()
        case .clientStalled:
            logger.warning(
                "client stalled, closing",
                metadata: ["client": "\(peer)", "idle_timeout_seconds": "\(cfg.idleTimeoutSeconds)"])
            if ex?.head != nil { logAccess() }
            close()
        case .upstreamStalled:
            guard let t = ex?.transfer else { return }
            cancelTransfer()
            transferDidFinish(
                error: UpstreamError(
                    cause: .timeout,
                    detail: "no data from the upstream for \(cfg.upstreamTimeoutSeconds) s",
                    destination: t.destination, timeoutSeconds: cfg.upstreamTimeoutSeconds))
        case .tunnel:
            tunnel?.checkTimeouts(now: now)
        case .probeClient:
            if channel.peerHungUp() { clientGone() }
        }
    }
}
