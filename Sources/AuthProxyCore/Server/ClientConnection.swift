import CAuthProxyShims
import CCurl
import Dispatch
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// One client connection: the executor of its ``ExchangeStateMachine``. It moves bytes between the socket, TLS,
/// libcurl and the token service, reports what happened to the machine, and carries out what the machine
/// decides (answer, close, pause, resume, hold, retry). Lifecycle decisions are not taken here.
///
/// Memory per connection is bounded: at most ``maxInput`` unparsed input bytes, ``maxBuffered`` request-body
/// bytes waiting for libcurl, and ``maxBuffered`` response bytes waiting for the client. When a limit is
/// reached the producer is paused (client reads suspended, or the libcurl transfer paused) until the other
/// side catches up.
///
/// Confined to its loop's queue: every method runs there (Dispatch handlers, libcurl callbacks and token
/// answers are delivered on it).
final class ClientConnection: UpstreamTransferDelegate {
    static let maxBuffered = 256 * 1024
    static let maxInput = 80 * 1024

    let channel: SocketChannel
    let peer: String
    /// The client's IP address (rate limits and connection limits are per address when there is no user).
    let address: IPAddress
    /// The `[[client]]` the current request authenticated as (for a TLS-intercepted tunnel: the one that
    /// opened it); nil without proxy authentication.
    var client: ProxyClient? = nil
    /// The last `Proxy-Authorization` value that verified on this connection, so a keep-alive client repeating
    /// it costs no hashing.
    var verifiedAuthorization: String? = nil
    /// The credentials the current client may use (its `[[client]]` scope, or all).
    var credentials: CredentialStore
    unowned let loop: EventLoop
    var context: ServerContext { loop.context }
    var logger: Logger { loop.context.logger }
    /// Every lifecycle decision: see ``ExchangeStateMachine``.
    var machine: ExchangeStateMachine
    var inbuf = ByteBuffer()
    var parser = RequestHeadParser()
    /// TLS with the client after an intercepted CONNECT, and the host:port the tunnel was opened to (every
    /// request on it goes there, over https).
    var tls: TLSSession? = nil
    var intercept: (host: String, port: Int)? = nil
    var tlsPullScheduled = false

    // The bytes and resources of the exchange in progress (its state is the machine's).
    var head: RequestHead? = nil
    var transfer: UpstreamTransfer? = nil
    var tunnel: Tunnel? = nil
    var bodyRemaining: Int64 = 0
    var chunkDecoder: ChunkedDecoder? = nil
    var bodyBuffer = ByteBuffer()
    var bodyBytesIn: Int64 = 0
    var bodyBytesOut: Int64 = 0
    /// The upstream response head being read, as bytes (1xx and challenge heads are replaced by the next one).
    var responseHead = ResponseHeadAssembler(capacity: 0)
    /// The committed response head, waiting to go out with the first body bytes or at the end (empty: none).
    var heldHead = ByteBuffer()
    /// Body bytes held with the head while looking for a token error.
    var sniffBuffer: [UInt8] = []
    /// The browser origin a `/proxy` exchange answers to (CORS), nil otherwise.
    var corsOrigin: String? = nil
    // Credentials (token-type) applied to the exchange in progress.
    var credential: Credential? = nil
    var injectedToken: IssuedToken? = nil
    var tokenSite: TokenInjection.Site = .query
    /// A copy of the streamed request body for the retry; `replayOffset` is how much of it the current
    /// transfer has read.
    var replay: ReplayBuffer? = nil
    var replayOffset: Int64 = 0
    /// An urlencoded form body collected whole (to put the token into it), and how much was sent.
    var formBody: [UInt8]? = nil
    var formOffset = 0
    var originalURL: URLTarget? = nil
    /// Where the request goes: the client's URL, or its https form under `upgrade_to_https`.
    var upstreamURL: URLTarget? = nil
    /// Network-type credentials for the exchange (matched on the upstream URL, then the client's).
    var networkAuth = NetworkAuth()

    deinit {
        // Backstop: a transfer must never outlive the connection whose memory its callbacks use.
        transfer?.cancel()
    }

    init(fd: Int32, peer: String, address: IPAddress, loop: EventLoop) {
        channel = SocketChannel(fd: fd, queue: loop.queue)
        self.peer = peer
        self.address = address
        self.loop = loop
        credentials = loop.context.access.all
        let cfg = loop.context.config
        machine = ExchangeStateMachine(
            limits: .init(seconds: cfg.headerTimeoutSeconds, idle: cfg.idleTimeoutSeconds, upstream: cfg.upstreamTimeoutSeconds),
            now: DispatchTime.now().uptimeNanoseconds)
    }

    /// Whether the request body of the exchange in progress has been read to its end.
    var bodyComplete: Bool { machine.exchange.map { $0.request == .complete } ?? true }

    var now: UInt64 { DispatchTime.now().uptimeNanoseconds }

    func start() {
        assertOnQueue(loop.queue)
        channel.onReadable = { [unowned self] in self.readable() }
        channel.onDrained = { [unowned self] in self.drained() }
        channel.onWriteError = { [unowned self] _ in self.clientGone() }
        channel.resumeReading()
    }

    // MARK: input

    func readable() {
        assertOnQueue(loop.queue)
        if case .tunnel = machine.state {
            tunnel?.clientReadable()
            return
        }
        var eof = false
        // libdispatch reports a hang-up (the client reset) once and then stops watching the socket, so a read
        // event may be the last one: while a request body streams in, read to EAGAIN (a short read does not mean
        // the error behind the data was seen), and when reading stopped early (the input limit, or a short read
        // before the head just parsed turned out to have a body) read on here rather than wait for another event.
        var more = true
        while more {
            more = false
            var atLimit = false
            var discarding = false
            if case .closing = machine.state { discarding = true }
            let toTheEnd = machine.readsBody
            reading: while true {
                guard inbuf.count < Self.maxInput, (tls?.bufferedCiphertext ?? 0) < Self.maxInput else {
                    more = true
                    atLimit = true
                    break reading
                }
                switch channel.read(into: loop.scratch) {
                case .bytes(let n):
                    machine.clientProgress(now: now)
                    if discarding { continue }
                    let bytes = UnsafeRawBufferPointer(rebasing: loop.scratch[0..<n])
                    if let tls { tls.feed(bytes) } else { inbuf.append(bytes) }
                    if n < loop.scratch.count, !toTheEnd {
                        more = true
                        break reading
                    }
                case .wouldBlock:
                    break reading
                case .eof:
                    eof = true
                    break reading
                case .error:
                    clientGone()
                    return
                }
            }
            if tls != nil, !discarding {
                switch pullTLS() {
                case .closed: return
                case .eof: eof = true
                case .ok: break
                }
            }
            // Requests that arrived with the EOF are still served (a client may half-close after sending).
            process()
            if eof {
                clientEOF()
                return
            }
            if more, channel.isClosed || (!atLimit && !machine.readsBody)
                || machine.readInterest(buffered: max(inbuf.count, tls?.bufferedCiphertext ?? 0), limit: Self.maxInput)
                    != .read
            {
                more = false
            }
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
        if let tls, tls.handshakeDone, tls.hasBufferedInput, inbuf.count < Self.maxInput, !tlsPullScheduled {
            tlsPullScheduled = true
            nonisolated(unsafe) let me = self
            loop.queue.async {
                me.tlsPullScheduled = false
                switch me.machine.state {
                case .closed, .closing: return
                default: break
                }
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

    /// Parses and starts as many requests as the buffered input and the exchange in progress allow.
    func process() {
        while true {
            switch machine.nextInputStep(buffered: inbuf.count, now: now) {
            case .wait, .discard:
                return
            case .pumpBody:
                pumpBody()
                return
            case .parseHead:
                let result = inbuf.withUnreadBytes { parser.parse($0) }
                switch result {
                case .needMore:
                    return
                case .failed(let e):
                    parser.reset()
                    inbuf.removeAll()
                    head = nil
                    machine.requestFailed(now: now)
                    respond(ErrorResponse.forParseError(e), close: true)
                    return
                case .complete(let h, let consumed):
                    inbuf.consume(consumed)
                    parser.reset()
                    begin(h)
                }
            }
        }
    }

    func begin(_ h: RequestHead) {
        var hasBody = true
        switch h.framing {
        case .none, .contentLength(0):
            hasBody = false
            chunkDecoder = nil
        case .contentLength(let n):
            bodyRemaining = n
            chunkDecoder = nil
        case .chunked:
            chunkDecoder = ChunkedDecoder()
        }
        machine.requestBegan(.init(isHead: h.isHead, minorVersion: h.minorVersion, expectsContinue: h.expectsContinue,
            keepAlive: h.keepAlive, hasBody: hasBody), shuttingDown: loop.shuttingDown, now: now)
        credential = nil
        corsOrigin = nil
        head = h
        bodyBytesIn = 0
        bodyBytesOut = 0
        responseHead.reset()
        heldHead.removeAll()
        guard authorize(h) else { return }
        if let ic = intercept {
            // Inside an intercepted tunnel every request goes to the CONNECT host, over https.
            switch h.target {
            case .origin(let path):
                head?.target = .absolute(URLTarget(scheme: "https", host: ic.host, port: ic.port, pathAndQuery: path == "*" ? "/" : path))
            case .absolute(let u) where u.scheme == "https" && u.host == ic.host && u.port == ic.port:
                break
            default:
                respond(ErrorResponse(status: 400, message: "Requests inside a tunnel to \(ic.host):\(ic.port) must be for that host"), close: true)
                return
            }
            if case .absolute(let u)? = head?.target { forward(u) }
            return
        }
        switch h.target {
        case .origin(let path):
            serveOwnEndpoint(path)
        case .authority(let host, let port):
            startTunnel(host: host, port: port)
        case .absolute(let url):
            if url.scheme == "http", context.ownAuthorities.contains("\(url.urlHost):\(url.port)") {
                serveOwnEndpoint(url.pathAndQuery)
            } else {
                forward(url)
            }
        }
    }

    /// Proxy authentication (`[[client]]`): true when the request may go on, as `client` with its credential
    /// scope; otherwise it has been answered with 407. `/healthz` needs none (liveness probes), and requests
    /// inside an intercepted tunnel act for the client that opened it.
    func authorize(_ h: RequestHead) -> Bool {
        let auth = context.access.authenticator
        guard auth.isRequired, intercept == nil else { return true }
        if case .origin(let p) = h.target, p.prefix(while: { $0 != "?" }) == "/healthz" { return true }
        let presented = h.headers.first("proxy-authorization")
        if let presented, presented == verifiedAuthorization, client != nil { return true }
        if let c = auth.authenticate(presented) {
            client = c
            credentials = context.access.store(for: c)
            verifiedAuthorization = presented
            return true
        }
        client = nil
        verifiedAuthorization = nil
        if presented != nil, let held = context.access.throttle.admit("proxy-auth", now: DispatchTime.now().uptimeNanoseconds) {
            logger.warning("proxy authentication failed", metadata: ["client": "\(peer)", "failed_since_last_report": "\(held)"])
        }
        // A refused CONNECT closes (bytes meant for the tunnel must not be read as requests), and so does a
        // request whose body was not read (the machine's rule for every local answer).
        var close = false
        if case .authority = h.target { close = true }
        respond(ErrorResponse(status: 407, message: "Proxy authentication required",
            details: ["Send Proxy-Authorization: Basic with the name and password of a [[client]] of this proxy "
                + "(curl --proxy-user, or http://name:password@host:port as the proxy URL)."]),
            close: close, extraHeaders: "Proxy-Authenticate: Basic realm=\"authproxy\"\r\n")
        return false
    }

    // MARK: responses and the end of an exchange

    /// Answers the exchange from the proxy itself. `close` closes the connection afterwards (so does a request
    /// body that was not read).
    func respondLocal(status: Int, contentType: String, body: String, close: Bool = false, extraHeaders: String = "") {
        guard let keepAlive = machine.answerLocally(status: status, close: close) else { return }
        let minor = head?.minorVersion ?? 1
        // A 204 has neither body nor Content-Length (RFC 9110 §8.6).
        let noBody = status == 204
        var s = "HTTP/1.1 \(status) \(reasonPhrase(status))\r\n"
        if !noBody { s += "Content-Type: \(contentType)\r\nContent-Length: \(body.utf8.count)\r\n" }
        s += extraHeaders
        if let o = corsOrigin { s += "Access-Control-Allow-Origin: \(o)\r\nVary: Origin\r\n" }
        if !keepAlive { s += "Connection: close\r\n" } else if minor == 0 { s += "Connection: keep-alive\r\n" }
        s += "\r\n"
        if head?.isHead != true, !noBody {
            s += body
            bodyBytesOut = Int64(body.utf8.count)
        }
        heldHead.removeAll()
        send(s)
        finishExchange()
    }

    /// Answers with an ArcGIS-style JSON error.
    func respond(_ e: ErrorResponse, close: Bool, extraHeaders: String = "") {
        transfer?.cancel()
        transfer = nil
        respondLocal(status: e.status, contentType: "application/json; charset=utf-8", body: e.jsonBody, close: close,
            extraHeaders: e.retryAfter.map { "Retry-After: \($0)\r\n" + extraHeaders } ?? extraHeaders)
    }

    /// The exchange is answered: log it, free its buffers, and keep the connection or begin closing it.
    func finishExchange() {
        // A write may have failed while answering: a closed connection stays closed.
        guard machine.exchange != nil else { return }
        logAccess()
        head = nil
        chunkDecoder = nil
        bodyBuffer.removeAll()
        replay = nil  // closes (and so frees) a spill file at once, not at the next request
        formBody = nil
        heldHead.removeAll()
        sniffBuffer = []
        responseHead.reset()
        credential = nil
        injectedToken = nil
        originalURL = nil
        upstreamURL = nil
        networkAuth = NetworkAuth()
        switch machine.endExchange(shuttingDown: loop.shuttingDown, now: now) {
        case .close: beginClosing()
        case .awaitNext, .none: break
        }
    }

    /// One access-log line for the exchange in progress; `status` and `started` stand in for the machine's when
    /// the exchange is already gone from it (a client that left: 499).
    func logAccess(status: Int? = nil, started: UInt64? = nil) {
        guard logger.logLevel <= .info else { return }
        let method: String
        let url: String
        if let h = head {
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
        logger.info("access", metadata: [
            "client": "\(peer)", "method": "\(method)", "url": "\(url)", "status": "\(status ?? machine.current?.status ?? 0)",
            "bytes_in": "\(bodyBytesIn)", "bytes_out": "\(bodyBytesOut)",
            "duration_ms": "\(Double(Int(ms * 10)) / 10)", "credential": "\(credential?.name ?? "-")",
            "user": "\(client?.name ?? "-")",
        ])
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
        if machine.clientDrained(pending: channel.pendingCount, now: now) { transfer?.resume() }
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
            if let t = tunnel {
                t.clientEOF()
            } else {
                close()
            }
        case .close(let status):
            if let status, head != nil { logAccess(status: status, started: started) }
            close()
        }
    }

    func close() {
        guard !channel.isClosed else { return }
        machine.closed()
        transfer?.cancel()
        transfer = nil
        replay = nil  // a spill file is freed now, not when the last reference to the connection goes
        tunnel?.close()
        tunnel = nil
        channel.close()
        loop.connectionClosed(self)
    }

    /// A connection idle this long gives its buffers back; a busy keep-alive one reuses them between exchanges.
    static let trimAfter: UInt64 = 1_000_000_000

    /// Frees every per-exchange buffer of an idle connection (they are allocated again by the next request).
    func releaseIdleStorage() {
        inbuf.releaseStorage()
        bodyBuffer.releaseStorage()
        heldHead.releaseStorage()
        responseHead = ResponseHeadAssembler(capacity: 0)
        sniffBuffer = []
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
            respond(ErrorResponse(status: 503, message: "authproxy is shutting down",
                details: ["The request did not finish within shutdown_grace_seconds (\(context.config.shutdownGraceSeconds) s); retry it."]),
                close: true)
            close()
        case .cut(let status):
            if head != nil { logAccess(status: status, started: started) }
            close()
        case .tunnel:
            if let t = tunnel { t.finish() } else { close() }
        }
    }

    func checkTimeouts(now: UInt64) {
        assertOnQueue(loop.queue)
        let cfg = context.config
        switch machine.tick(now: now, clientPending: channel.pendingCount, lastSendProgress: channel.lastSendProgress,
            clientReadsPaused: !channel.isReading)
        {
        case .none:
            if machine.isIdle(now: now, for: Self.trimAfter), inbuf.isEmpty { releaseIdleStorage() }
        case .headerTimedOut:
            head = nil
            machine.requestFailed(now: now)
            respond(ErrorResponse(status: 408, message: "Request header not received within \(cfg.headerTimeoutSeconds) s"), close: true)
        case .close:
            close()
        case .closeForShutdown:
            machine.closingForShutdown(now: now)
            beginClosing()
        case .clientStalled:
            logger.warning("client stalled, closing", metadata: ["client": "\(peer)", "idle_timeout_seconds": "\(cfg.idleTimeoutSeconds)"])
            if head != nil { logAccess() }
            close()
        case .upstreamStalled:
            guard let t = transfer else { return }
            t.cancel()
            transferDidFinish(error: UpstreamError(code: CURLE_OPERATION_TIMEDOUT,
                detail: "no data from the upstream for \(cfg.upstreamTimeoutSeconds) s",
                destination: t.destination, timeoutSeconds: cfg.upstreamTimeoutSeconds))
        case .tunnel:
            tunnel?.checkTimeouts(now: now)
        case .probeClient:
            if channel.peerHungUp() { clientGone() }
        }
    }
}
