import CAuthProxyShims
import CCurl
import Dispatch
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// One client connection: reads requests, forwards them through libcurl or a CONNECT tunnel, and streams
/// the answers back, one exchange at a time (bytes of pipelined requests wait in the input buffer).
///
/// Memory per connection is bounded: at most ``maxInput`` unparsed input bytes, ``maxBuffered`` request-body
/// bytes waiting for libcurl, and ``maxBuffered`` response bytes waiting for the client. When a limit is
/// reached the producer is paused (client reads suspended, or the libcurl transfer paused) until the other
/// side catches up.
///
/// Confined to its loop's queue.
final class ClientConnection: UpstreamTransferDelegate {
    static let maxBuffered = 256 * 1024
    static let maxInput = 80 * 1024
    static let lingerNanos: UInt64 = 2_000_000_000

    enum State {
        case awaitingHead
        case forwarding
        case tunnel
        /// Response sent, our side half-closed; discarding input until the client closes (lingering close,
        /// so a client still sending does not get a reset that destroys the response).
        case closing
        case closed
    }

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
    var state: State = .awaitingHead
    var inbuf = ByteBuffer()
    var parser = RequestHeadParser()
    var exchanges = 0
    var lastProgress: UInt64
    var headStarted: UInt64? = nil
    var closingSince: UInt64 = 0
    /// TLS with the client after an intercepted CONNECT, and the host:port the tunnel was opened to (every
    /// request on it goes there, over https).
    var tls: TLSSession? = nil
    var intercept: (host: String, port: Int)? = nil
    var tlsPullScheduled = false
    /// The client shut down its sending side after a complete request: answer it, then close.
    var clientHalfClosed = false

    // The exchange in progress.
    var head: RequestHead? = nil
    var exchangeStart: UInt64 = 0
    var keepAlive = true
    var transfer: UpstreamTransfer? = nil
    var tunnel: Tunnel? = nil
    var bodyRemaining: Int64 = 0
    var chunkDecoder: ChunkedDecoder? = nil
    var bodyComplete = true
    var bodyBuffer = ByteBuffer()
    var bodyBytesIn: Int64 = 0
    var sentContinue = false
    var curlReadPaused = false
    var curlWritePaused = false
    var responseStatus = 0
    var responseReason = ""
    var responseHeaders = HTTPHeaders()
    /// The response head is decided (status and framing fixed). It reaches the socket with the first body
    /// bytes or at the end (``heldHead``), so a small response costs one `send` and one wake-up of the client.
    var responseHeadSent = false
    var heldHead: String? = nil
    var responseChunked = false
    var responseNoBody = false
    var bodyBytesOut: Int64 = 0
    /// The browser origin a `/proxy` exchange answers to (CORS), nil otherwise.
    var corsOrigin: String? = nil
    // Credentials (token-type) applied to the exchange in progress.
    /// Counts exchanges, so an answer from the token service for an earlier exchange is ignored.
    var exchangeSerial = 0
    var credential: Credential? = nil
    var injectedToken: IssuedToken? = nil
    var tokenSite: TokenInjection.Site = .query
    /// 1 for the first try, 2 for the one retry after a token rejection.
    var attempt = 1
    /// The response is held (head and up to ``TokenRejection/lookAhead`` body bytes) to look for a token error.
    var sniffing = false
    var holding = false
    var sniffBuffer: [UInt8] = []
    /// A copy of the streamed request body for the retry; `replayOffset` is how much of it the current
    /// transfer has read.
    var replay: ReplayBuffer? = nil
    var replayOffset: Int64 = 0
    /// An urlencoded form body collected whole (to put the token into it), and how much was sent.
    var collectingForm = false
    var formBody: [UInt8]? = nil
    var formOffset = 0
    var originalURL: URLTarget? = nil
    /// Where the request goes: the client's URL, or its https form under `upgrade_to_https`.
    var upstreamURL: URLTarget? = nil
    /// Network-type credentials for the exchange (matched on the upstream URL, then the client's).
    var networkAuth = NetworkAuth()

    /// Last time the upstream sent or took bytes, for the stall timeout (`upstream_timeout_seconds`). Time
    /// when the transfer is paused for the client's sake does not count against the upstream.
    var lastUpstreamProgress: UInt64 = 0

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
        lastProgress = DispatchTime.now().uptimeNanoseconds
    }

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
        if state == .tunnel {
            tunnel?.clientReadable()
            return
        }
        var eof = false
        reading: while inbuf.count < Self.maxInput, (tls?.bufferedCiphertext ?? 0) < Self.maxInput {
            switch channel.read(into: loop.scratch) {
            case .bytes(let n):
                lastProgress = DispatchTime.now().uptimeNanoseconds
                if state == .closing { continue }
                let bytes = UnsafeRawBufferPointer(rebasing: loop.scratch[0..<n])
                if let tls { tls.feed(bytes) } else { inbuf.append(bytes) }
                if n < loop.scratch.count { break reading }
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
        if tls != nil, state != .closing {
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
        updateReadInterest()
    }

    func updateReadInterest() {
        guard state != .closed, state != .tunnel, !clientHalfClosed else { return }
        if state == .closing || (inbuf.count < Self.maxInput && (tls?.bufferedCiphertext ?? 0) < Self.maxInput) {
            channel.resumeReading()
        } else {
            channel.pauseReading()
        }
        // Decrypted-but-unread input does not make the socket readable again: pull it when there is room.
        if let tls, tls.handshakeDone, tls.hasBufferedInput, inbuf.count < Self.maxInput, !tlsPullScheduled {
            tlsPullScheduled = true
            nonisolated(unsafe) let me = self
            loop.queue.async {
                me.tlsPullScheduled = false
                guard me.state != .closed, me.state != .closing else { return }
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
            switch state {
            case .closed:
                return
            case .awaitingHead:
                if inbuf.isEmpty {
                    headStarted = nil
                    return
                }
                if headStarted == nil { headStarted = DispatchTime.now().uptimeNanoseconds }
                let result = inbuf.withUnreadBytes { parser.parse($0) }
                switch result {
                case .needMore:
                    return
                case .failed(let e):
                    parser.reset()
                    inbuf.removeAll()
                    head = nil
                    exchangeStart = DispatchTime.now().uptimeNanoseconds
                    respond(ErrorResponse.forParseError(e), close: true)
                    return
                case .complete(let h, let consumed):
                    inbuf.consume(consumed)
                    parser.reset()
                    headStarted = nil
                    begin(h)
                }
            case .forwarding:
                pumpBody()
                return
            case .tunnel, .closing:
                return
            }
        }
    }

    func begin(_ h: RequestHead) {
        exchanges += 1
        credential = nil
        corsOrigin = nil
        head = h
        exchangeStart = DispatchTime.now().uptimeNanoseconds
        keepAlive = h.keepAlive && !loop.shuttingDown
        bodyBytesIn = 0
        bodyBytesOut = 0
        responseStatus = 0
        responseHeadSent = false
        heldHead = nil
        responseChunked = false
        responseNoBody = false
        sentContinue = false
        curlReadPaused = false
        curlWritePaused = false
        switch h.framing {
        case .none, .contentLength(0):
            bodyComplete = true
            chunkDecoder = nil
        case .contentLength(let n):
            bodyComplete = false
            bodyRemaining = n
            chunkDecoder = nil
        case .chunked:
            bodyComplete = false
            chunkDecoder = ChunkedDecoder()
        }
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
        // request whose body was not read.
        var close = !bodyComplete
        if case .authority = h.target { close = true }
        respond(ErrorResponse(status: 407, message: "Proxy authentication required",
            details: ["Send Proxy-Authorization: Basic with the name and password of a [[client]] of this proxy "
                + "(curl --proxy-user, or http://name:password@host:port as the proxy URL)."]),
            close: close, extraHeaders: "Proxy-Authenticate: Basic realm=\"authproxy\"\r\n")
        return false
    }

    // MARK: responses and the end of an exchange

    func respondLocal(status: Int, contentType: String, body: String, extraHeaders: String = "") {
        responseStatus = status
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
        responseHeadSent = true
        send(s)
        finishExchange()
    }

    /// Answers with an ArcGIS-style JSON error.
    func respond(_ e: ErrorResponse, close: Bool, extraHeaders: String = "") {
        if close { keepAlive = false }
        transfer?.cancel()
        transfer = nil
        respondLocal(status: e.status, contentType: "application/json; charset=utf-8", body: e.jsonBody, extraHeaders: extraHeaders)
    }

    func finishExchange() {
        // A write may have failed while answering: a closed connection stays closed.
        guard state != .closed else { return }
        logAccess()
        head = nil
        chunkDecoder = nil
        bodyBuffer.removeAll()
        replay = nil  // closes (and so frees) a spill file at once, not at the next request
        formBody = nil
        collectingForm = false
        if !keepAlive || !bodyComplete || loop.shuttingDown || clientHalfClosed {
            beginClosing()
        } else {
            state = .awaitingHead
            lastProgress = DispatchTime.now().uptimeNanoseconds
        }
    }

    func logAccess() {
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
        let ms = Double(DispatchTime.now().uptimeNanoseconds - exchangeStart) / 1_000_000
        logger.info("access", metadata: [
            "client": "\(peer)", "method": "\(method)", "url": "\(url)", "status": "\(responseStatus)",
            "bytes_in": "\(bodyBytesIn)", "bytes_out": "\(bodyBytesOut)",
            "duration_ms": "\(Double(Int(ms * 10)) / 10)", "credential": "\(credential?.name ?? "-")",
            "user": "\(client?.name ?? "-")",
        ])
    }

    /// Half-closes after the response is flushed, then discards input until the client closes or
    /// ``lingerNanos`` pass.
    func beginClosing() {
        state = .closing
        closingSince = DispatchTime.now().uptimeNanoseconds
        inbuf.removeAll()
        if let tls {
            tls.shutdown()
            flushTLS()
        }
        channel.shutdownWriteWhenFlushed()
        channel.resumeReading()
    }

    func drained() {
        lastProgress = DispatchTime.now().uptimeNanoseconds
        switch state {
        case .tunnel:
            tunnel?.clientDrained()
        case .forwarding:
            if curlWritePaused, channel.pendingCount < Self.maxBuffered / 2 {
                curlWritePaused = false
                lastUpstreamProgress = DispatchTime.now().uptimeNanoseconds
                transfer?.resume()
            }
        default:
            break
        }
    }

    /// The client sent EOF. It may only have half-closed (shutdown after sending its request), so a complete
    /// request still gets its response; anything incomplete is abandoned. A client that is really gone shows
    /// up as a failed write, which cancels the transfer.
    func clientEOF() {
        switch state {
        case .tunnel:
            tunnel?.clientEOF()
        case .forwarding where bodyComplete && !collectingForm:
            keepAlive = false
            clientHalfClosed = true
            channel.pauseReading()
        case .closing where channel.pendingCount > 0:
            channel.pauseReading()  // the rest of the response is still going out; the linger check closes
        default:
            clientGone()
        }
    }

    /// The client closed or reset its connection: cancel whatever is in flight.
    func clientGone() {
        if state == .tunnel, let t = tunnel {
            t.clientEOF()
            return
        }
        if head != nil, state == .forwarding {
            responseStatus = responseHeadSent ? responseStatus : 499
            logAccess()
        }
        close()
    }

    func close() {
        guard state != .closed else { return }
        state = .closed
        transfer?.cancel()
        transfer = nil
        tunnel?.close()
        tunnel = nil
        channel.close()
        loop.connectionClosed(self)
    }

    func shutdownRequested() {
        switch state {
        case .awaitingHead where inbuf.isEmpty: close()
        case .awaitingHead, .forwarding: keepAlive = false
        default: break
        }
    }

    func checkTimeouts(now: UInt64) {
        assertOnQueue(loop.queue)
        let cfg = context.config
        switch state {
        case .awaitingHead:
            if let started = headStarted {
                if now - started > UInt64(cfg.headerTimeoutSeconds) * 1_000_000_000 {
                    head = nil
                    exchangeStart = now
                    respond(ErrorResponse(status: 408, message: "Request header not received within \(cfg.headerTimeoutSeconds) s"), close: true)
                }
            } else {
                let limit = exchanges == 0 ? cfg.headerTimeoutSeconds : cfg.idleTimeoutSeconds
                if now - lastProgress > UInt64(limit) * 1_000_000_000 { close() }
            }
        case .forwarding:
            // A client that stopped reading its response (or stopped sending its body) for the idle timeout.
            let progress = max(lastProgress, channel.lastSendProgress)
            if channel.pendingCount > 0 || (!bodyComplete && (curlReadPaused || collectingForm)),
                now - progress > UInt64(cfg.idleTimeoutSeconds) * 1_000_000_000
            {
                logger.warning("client stalled, closing", metadata: ["client": "\(peer)", "idle_timeout_seconds": "\(cfg.idleTimeoutSeconds)"])
                if head != nil { logAccess() }
                close()
                return
            }
            // An upstream that sent and took nothing for the upstream timeout while we were ready for it.
            // (libcurl's low-speed check averages over a window, so a stall after a trickle would be cut late.)
            if let t = transfer, !curlWritePaused, !curlReadPaused,
                now - lastUpstreamProgress > UInt64(cfg.upstreamTimeoutSeconds) * 1_000_000_000
            {
                t.cancel()
                transferDidFinish(error: UpstreamError(code: CURLE_OPERATION_TIMEDOUT,
                    detail: "no data from the upstream for \(cfg.upstreamTimeoutSeconds) s",
                    destination: t.destination, timeoutSeconds: cfg.upstreamTimeoutSeconds))
            }
        case .tunnel:
            tunnel?.checkTimeouts(now: now)
        case .closing:
            if channel.pendingCount > 0 {
                // Still sending the last response: only a client that stopped reading is cut off.
                if now - max(closingSince, channel.lastSendProgress) > UInt64(cfg.idleTimeoutSeconds) * 1_000_000_000 { close() }
            } else if now - max(closingSince, channel.lastSendProgress) > Self.lingerNanos {
                close()
            }
        case .closed:
            break
        }
    }
}
