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
    unowned let loop: EventLoop
    private var context: ServerContext { loop.context }
    private var logger: Logger { loop.context.logger }
    private(set) var state: State = .awaitingHead
    private var inbuf = ByteBuffer()
    private var parser = RequestHeadParser()
    private var exchanges = 0
    private var lastProgress: UInt64
    private var headStarted: UInt64? = nil
    private var closingSince: UInt64 = 0
    /// TLS with the client after an intercepted CONNECT, and the host:port the tunnel was opened to (every
    /// request on it goes there, over https).
    private var tls: TLSSession? = nil
    private var intercept: (host: String, port: Int)? = nil
    private var tlsPullScheduled = false
    /// The client shut down its sending side after a complete request: answer it, then close.
    private var clientHalfClosed = false

    // The exchange in progress.
    private var head: RequestHead? = nil
    private var exchangeStart: UInt64 = 0
    private var keepAlive = true
    private var transfer: UpstreamTransfer? = nil
    private var tunnel: Tunnel? = nil
    private var bodyRemaining: Int64 = 0
    private var chunkDecoder: ChunkedDecoder? = nil
    private var bodyComplete = true
    private var bodyBuffer = ByteBuffer()
    private var bodyBytesIn: Int64 = 0
    private var sentContinue = false
    private var curlReadPaused = false
    private var curlWritePaused = false
    private var responseStatus = 0
    private var responseReason = ""
    private var responseHeaders = HTTPHeaders()
    /// The response head is decided (status and framing fixed). It reaches the socket with the first body
    /// bytes or at the end (``heldHead``), so a small response costs one `send` and one wake-up of the client.
    private var responseHeadSent = false
    private var heldHead: String? = nil
    private var responseChunked = false
    private var responseNoBody = false
    private var bodyBytesOut: Int64 = 0
    /// The browser origin a `/proxy` exchange answers to (CORS), nil otherwise.
    private var corsOrigin: String? = nil
    // Credentials (token-type) applied to the exchange in progress.
    /// Counts exchanges, so an answer from the token service for an earlier exchange is ignored.
    private var exchangeSerial = 0
    private var credential: Credential? = nil
    private var injectedToken: IssuedToken? = nil
    private var tokenSite: TokenInjection.Site = .query
    /// 1 for the first try, 2 for the one retry after a token rejection.
    private var attempt = 1
    /// The response is held (head and up to ``TokenRejection/lookAhead`` body bytes) to look for a token error.
    private var sniffing = false
    private var holding = false
    private var sniffBuffer: [UInt8] = []
    /// A copy of the streamed request body for the retry; `replayOffset` is how much of it the current
    /// transfer has read.
    private var replay: ReplayBuffer? = nil
    private var replayOffset: Int64 = 0
    /// An urlencoded form body collected whole (to put the token into it), and how much was sent.
    private var collectingForm = false
    private var formBody: [UInt8]? = nil
    private var formOffset = 0
    private var originalURL: URLTarget? = nil
    /// Where the request goes: the client's URL, or its https form under `upgrade_to_https`.
    private var upstreamURL: URLTarget? = nil
    /// Network-type credentials for the exchange (matched on the upstream URL, then the client's).
    private var networkAuth = NetworkAuth()

    /// Last time the upstream sent or took bytes, for the stall timeout (`upstream_timeout_seconds`). Time
    /// when the transfer is paused for the client's sake does not count against the upstream.
    private var lastUpstreamProgress: UInt64 = 0

    deinit {
        // Backstop: a transfer must never outlive the connection whose memory its callbacks use.
        transfer?.cancel()
    }

    init(fd: Int32, peer: String, loop: EventLoop) {
        channel = SocketChannel(fd: fd, queue: loop.queue)
        self.peer = peer
        self.loop = loop
        lastProgress = DispatchTime.now().uptimeNanoseconds
    }

    func start() {
        channel.onReadable = { [unowned self] in self.readable() }
        channel.onDrained = { [unowned self] in self.drained() }
        channel.onWriteError = { [unowned self] _ in self.clientGone() }
        channel.resumeReading()
    }

    // MARK: input

    private func readable() {
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

    private enum TLSPull { case ok, eof, closed }

    /// Advances the TLS handshake and decrypts buffered input into `inbuf` (up to its limit).
    private func pullTLS() -> TLSPull {
        guard let tls else { return .ok }
        if !tls.handshakeDone {
            switch tls.handshake() {
            case .needMore:
                flushTLS()
                return .ok
            case .failed(let message, let untrusted):
                flushTLS()  // the alert
                if untrusted {
                    logger.warning("client did not trust the authproxy CA", metadata: ["client": "\(peer)",
                        "host": "\(tls.servedName ?? tls.fallbackHost)", "cause": "\(message)",
                        "hint": "make the client trust the CA in [tls] ca_cert"])
                } else {
                    logger.warning("TLS handshake with client failed", metadata: ["client": "\(peer)",
                        "host": "\(tls.servedName ?? tls.fallbackHost)", "cause": "\(message)"])
                }
                close()
                return .closed
            case .done:
                flushTLS()
            }
        }
        while inbuf.count < Self.maxInput {
            switch tls.read(into: loop.scratch) {
            case .bytes(let n):
                inbuf.append(UnsafeRawBufferPointer(rebasing: loop.scratch[0..<n]))
            case .wantMore:
                flushTLS()
                return .ok
            case .closed:
                return .eof
            case .failed(let message):
                logger.warning("TLS error from client", metadata: ["client": "\(peer)", "cause": "\(message)"])
                close()
                return .closed
            }
        }
        return .ok
    }

    private func flushTLS() {
        tls?.drain { channel.write($0) }
    }

    /// Writes to the client: through TLS when the connection is intercepted.
    private func send(_ bytes: UnsafeRawBufferPointer) {
        guard let tls else {
            channel.write(bytes)
            return
        }
        guard !channel.isClosed, tls.write(bytes) else { return }
        flushTLS()
    }

    private func send(_ string: String) {
        var s = string
        s.withUTF8 { send(UnsafeRawBufferPointer($0)) }
    }

    private func updateReadInterest() {
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
    private func process() {
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

    private func begin(_ h: RequestHead) {
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

    // MARK: the proxy's own endpoints

    private func serveOwnEndpoint(_ target: String) {
        let path = target.prefix { $0 != "?" }
        if path == "/proxy" {
            serveProxyEndpoint(target)  // forwards the body like any proxied request
            return
        }
        // The other endpoints take no body; rather than read one, close after answering.
        if !bodyComplete { keepAlive = false }
        switch path {
        case "/healthz":
            guard head?.method == "GET" || head?.method == "HEAD" else {
                respond(ErrorResponse(status: 405, message: "Method not allowed on /healthz"), close: false)
                return
            }
            respondLocal(status: 200, contentType: "application/json", body: "{\"status\":\"ok\"}")
        default:
            respond(ErrorResponse(status: 404, message: "No such endpoint on this proxy: \(path.prefix(200))",
                details: ["Send requests in absolute form (configure this address as HTTP_PROXY), or GET /healthz."]), close: false)
        }
    }

    /// The ArcGIS Maps SDK for JavaScript `proxyUrl` form: `GET /proxy?https://server/path?query`. Browsers
    /// cannot be pointed at a forward proxy per request, so web apps send their requests here. Any web page
    /// could otherwise make the browser spend the proxy's credentials, so the endpoint only exists with
    /// `[proxy] allowed_origins`, and a request from another origin is refused.
    private func serveProxyEndpoint(_ target: String) {
        guard let h = head else { return }
        let allowed = context.config.allowedOrigins
        guard !allowed.isEmpty else {
            respond(ErrorResponse(status: 404, message: "The /proxy endpoint is off",
                details: ["Set [proxy] allowed_origins to the web app origins that may use it."]), close: false)
            return
        }
        let origin = h.headers.first("origin")
        if let origin, !allowed.contains("*"), !allowed.contains(origin) {
            respond(ErrorResponse(status: 403, message: "Origin \(origin.prefix(200)) may not use this proxy",
                details: ["It is not in [proxy] allowed_origins."]), close: false)
            return
        }
        corsOrigin = origin
        if h.method == "OPTIONS", h.headers.contains("access-control-request-method") {
            // CORS preflight, answered here (the upstream never sees it).
            var extra = "Access-Control-Allow-Methods: GET, POST, HEAD, OPTIONS\r\nAccess-Control-Max-Age: 600\r\n"
            if let wanted = h.headers.first("access-control-request-headers") {
                extra += "Access-Control-Allow-Headers: \(wanted.filter { $0 != "\r" && $0 != "\n" })\r\n"
            }
            respondLocal(status: 204, contentType: "text/plain", body: "", extraHeaders: extra)
            return
        }
        guard let q = target.firstIndex(of: "?"),
            case .absolute(let url)? = try? RequestHeadParser.parseTarget(method: h.method, String(target[target.index(after: q)...]))
        else {
            respond(ErrorResponse(status: 400, message: "Expected /proxy?<http(s) URL>"), close: false)
            return
        }
        head?.target = .absolute(url)
        forward(url)
    }

    // MARK: forwarding through libcurl

    private func forward(_ url: URLTarget) {
        guard let h = head else { return }
        state = .forwarding
        exchangeSerial &+= 1
        credential = nil
        injectedToken = nil
        attempt = 1
        sniffing = false
        holding = false
        sniffBuffer = []
        replay = nil
        replayOffset = 0
        formBody = nil
        formOffset = 0
        collectingForm = false
        originalURL = url
        upstreamURL = url
        if url.scheme == "http", context.credentials.upgradesToHTTPS(url) {
            // upgrade_to_https: the client speaks plain http to us, we speak https upstream.
            upstreamURL = URLTarget(scheme: "https", host: url.host, port: url.port == 80 ? 443 : url.port, pathAndQuery: url.pathAndQuery)
        }
        networkAuth = NetworkAuth()
        if !context.credentials.isEmpty {
            networkAuth = context.credentials.network(for: upstreamURL!)
            if upstreamURL != url {
                // upgrade_to_https: a credential may be written for the client's http:// URL or the https one.
                networkAuth.fill(from: context.credentials.network(for: url))
            }
        }
        if hasBody(h) {
            // A copy of the body so libcurl can rewind: when a kept-alive upstream connection turns out dead
            // (first MiB), or for multi-round-trip authentication (NTLM, Digest, Negotiate), up to
            // max_replay_bytes. A token credential that may retry replaces it with a larger one.
            let limit = networkAuth.answersChallenges ? context.config.maxReplayBytes : Int64(ReplayBuffer.memoryLimit)
            replay = ReplayBuffer(limit: limit, directory: context.config.stateDir)
        }
        guard let c = context.credentials.tokenCredential(for: url) else {
            if context.config.unmatched == .deny, !context.credentials.matchesAny(url) {
                respond(ErrorResponse(status: 403, message: "Destination \(url.origin) is not allowed",
                    details: ["No credential matches it and [proxy] unmatched = \"deny\"."]), close: !bodyComplete)
                return
            }
            startTransfer(url: upstreamURL!, headers: h.headers)
            return
        }
        if !c.overrideClientToken, TokenInjection.clientHasToken(pathAndQuery: url.pathAndQuery, headers: h.headers) {
            // The client authenticates itself: leave its token alone and do not retry.
            startTransfer(url: upstreamURL!, headers: h.headers)
            return
        }
        credential = c
        tokenSite = TokenInjection.site(placement: c.placement, method: h.method, isForm: TokenInjection.isForm(h.headers))
        if tokenSite == .form {
            if case .contentLength(let n) = h.framing, n <= Int64(Self.maxFormBytes) {
                // The token goes into the form: collect it whole first (small by nature), then inject.
                collectingForm = true
                formBody = []
                formBody!.reserveCapacity(Int(n))
                if h.expectsContinue, !sentContinue {
                    sentContinue = true
                    send("HTTP/1.1 100 Continue\r\n\r\n")
                }
                if bodyComplete { formCollected() } else { pumpBody() }
                return
            }
            tokenSite = .query  // a large or chunked form keeps streaming; the token goes into the URL
        }
        if c.isRefreshable, hasBody(h) {
            replay = ReplayBuffer(limit: context.config.maxReplayBytes, directory: context.config.stateDir)
        }
        obtainToken()
    }

    private func hasBody(_ h: RequestHead) -> Bool {
        h.framing != .none && h.framing != .contentLength(0) && h.method != "HEAD"
    }

    /// Form bodies up to this size are collected to carry the token; larger ones get it in the URL.
    static let maxFormBytes = 1024 * 1024

    /// The collected form is complete: check for a client token in it, then get ours.
    private func formCollected() {
        collectingForm = false
        guard let c = credential, let h = head, let url = originalURL else { return }
        if !c.overrideClientToken, TokenInjection.clientHasToken(pathAndQuery: url.pathAndQuery, headers: h.headers, form: formBody) {
            credential = nil
            startTransfer(url: upstreamURL ?? url, headers: h.headers)
            return
        }
        obtainToken()
    }

    private func obtainToken() {
        // The token service is reached through the URL the request really goes to (https under
        // upgrade_to_https), so a password never travels to an http:// token service the client named.
        guard let c = credential, let url = upstreamURL ?? originalURL, let tokens = context.tokens else { return }
        if let t = tokens.cachedToken(for: c, target: url) {
            tokenReady(.success(t))
            return
        }
        let serial = exchangeSerial
        let queue = loop.queue
        nonisolated(unsafe) let me = self
        tokens.token(for: c, target: url) { result in
            queue.async {
                guard me.state == .forwarding, me.exchangeSerial == serial else { return }
                me.tokenReady(result)
            }
        }
    }

    private func tokenReady(_ result: Result<IssuedToken, TokenError>) {
        guard let c = credential, let h = head, let url = originalURL else { return }
        switch result {
        case .failure(let e):
            respond(e.response, close: !bodyComplete)
            process()
            updateReadInterest()
        case .success(let t):
            let upstream = upstreamURL ?? url
            if t.ssl && upstream.scheme == "http" {
                respond(ErrorResponse(status: 502, message: "Credential '\(c.name)': its token may only be sent over https",
                    details: ["The token service marked the token ssl:true; request \(url.origin) over https (or set upgrade_to_https when available)."]),
                    close: !bodyComplete)
                return
            }
            injectedToken = t
            let applied = TokenInjection.apply(token: t.value, site: tokenSite, pathAndQuery: url.pathAndQuery,
                headers: h.headers, form: tokenSite == .form ? formBody : nil)
            var headers = applied.headers
            if let r = t.referer {
                headers.remove(name: "referer")
                headers.add(name: "Referer", value: r)
            }
            if tokenSite == .form { formBody = applied.form }
            var target = upstream
            target.pathAndQuery = applied.pathAndQuery
            // Responses are inspected for token errors when a retry (or a clear error) can follow.
            switch c.kind {
            case .apiKey: sniffing = false
            default: sniffing = true
            }
            startTransfer(url: target, headers: headers)
        }
    }

    /// Starts the libcurl transfer for the current request with `headers` (hop-by-hop fields are removed here).
    private func startTransfer(url: URLTarget, headers: HTTPHeaders) {
        guard state != .closed, let h = head else { return }
        var lines: [String] = []
        lines.reserveCapacity(headers.count + 3)
        var hasAccept = false
        let named = headers.connectionNamedFields()
        for f in headers {
            if HTTPHeaders.isHopByHop(f.name, named: named) { continue }
            if f.name.caseInsensitiveEquals("host") || f.name.caseInsensitiveEquals("content-length")
                || f.name.caseInsensitiveEquals("expect")
            {
                continue
            }
            if f.name.caseInsensitiveEquals("accept") { hasAccept = true }
            lines.append(f.value.isEmpty ? "\(f.name);" : "\(f.name): \(f.value)")
        }
        lines.append("Via: \(context.viaValue)")
        // Stop libcurl adding headers the client did not send.
        lines.append("Expect:")
        if !hasAccept { lines.append("Accept:") }
        var bodyLength: Int64?
        if let form = formBody {
            bodyLength = Int64(form.count)
        } else {
            switch h.framing {
            case .none: bodyLength = nil
            case .contentLength(let n): bodyLength = (n == 0 && (h.method == "GET" || h.method == "HEAD")) ? nil : n
            case .chunked: bodyLength = -1
            }
        }
        if h.method == "HEAD" { bodyLength = nil }
        state = .forwarding
        var request = UpstreamRequest(method: h.method, url: url.url, headerLines: lines, bodyLength: bodyLength,
            timeoutSeconds: context.config.upstreamTimeoutSeconds)
        request.network = networkAuth
        let t = UpstreamTransfer(
            multi: loop.multi,
            request: request,
            destination: "\(url.urlHost):\(url.port)", delegate: self)
        transfer = t
        lastUpstreamProgress = DispatchTime.now().uptimeNanoseconds
        t.start()
        pumpBody()
    }

    /// At the end of the response head: a token error by status, a body to hold and inspect, or nothing to see.
    private func decideSniffing() {
        if TokenRejection.isRejection(status: responseStatus) {
            holding = true
            if !tokenRejected() { sniffing = false }
            return
        }
        let length = responseHeaders.first("content-length").flatMap { Int64($0) }
        if responseNoBody || !TokenRejection.mayCarryError(contentType: responseHeaders.first("content-type"))
            || (length ?? 0) > Int64(TokenRejection.lookAhead)
        {
            sniffing = false
            return
        }
        holding = true
    }

    /// The upstream rejected the injected token (498/499 in any form). Returns true when the proxy takes over
    /// (a retry with a fresh token and the replayed body, or a clear error for a pregenerated token); false
    /// when the rejection is relayed as is (the held response is released and the transfer goes on).
    @discardableResult
    private func tokenRejected() -> Bool {
        guard let c = credential, let url = originalURL else { return false }
        if let t = injectedToken { context.tokens?.invalidate(c, target: upstreamURL ?? url, value: t.value) }
        var reason: String? = nil
        var explain = false
        if !c.isRefreshable {
            if case .token = c.kind { explain = true } else { reason = "credential type \(c.kind.typeName) cannot be refreshed" }
        } else if attempt > 1 {
            reason = "rejected again after a refresh"
        } else if let r = replay, r.overflowed {
            reason = r.failure ?? "the request body is larger than max_replay_bytes (\(context.config.maxReplayBytes)) and cannot be replayed"
        }
        if let reason {
            logger.warning("token rejected, relaying the rejection", metadata: ["credential": "\(c.name)",
                "url": "\(url.origin)\(url.path)", "status": "\(responseStatus)", "reason": "\(reason)"])
            releaseHeldResponse()
            return false
        }
        // Stop the transfer now; answer or retry on the next turn of the loop (starting a transfer or
        // answering from inside a libcurl callback is not allowed).
        transfer?.cancel()
        transfer = nil
        heldHead = nil
        responseHeadSent = false
        holding = false
        sniffBuffer = []
        let serial = exchangeSerial
        let explainInstead = explain
        nonisolated(unsafe) let me = self
        loop.queue.async {
            guard me.state == .forwarding, me.exchangeSerial == serial else { return }
            if explainInstead {
                me.respond(ErrorResponse(status: 502,
                    message: "Credential '\(c.name)': the upstream rejected its pregenerated token (expired or revoked)",
                    details: ["Renew it: generate a new token, put it in proxy.conf and restart authproxy."]), close: !me.bodyComplete)
                me.process()
                me.updateReadInterest()
            } else {
                me.retryWithFreshToken()
            }
        }
        return true
    }

    private func retryWithFreshToken() {
        guard let c = credential, let url = originalURL else { return }
        logger.info("token rejected, refreshing and retrying", metadata: ["credential": "\(c.name)", "url": "\(url.origin)\(url.path)"])
        attempt = 2
        responseStatus = 0
        responseHeaders = HTTPHeaders()
        replayOffset = 0
        formOffset = 0
        curlReadPaused = false
        curlWritePaused = false
        obtainToken()
    }

    /// Stops holding: the held head and body go to the client, and the transfer streams on.
    private func releaseHeldResponse() {
        holding = false
        sniffing = false
        let held = sniffBuffer
        sniffBuffer = []
        if held.isEmpty {
            if transfer == nil { return }
            flushHead()
        } else {
            held.withUnsafeBytes { loop.writeBody($0, head: heldHead, chunked: responseChunked) { send($0) } }
            heldHead = nil
            bodyBytesOut += Int64(held.count)
        }
    }

    /// Moves request-body bytes from the input buffer to the body buffer libcurl reads from.
    private func pumpBody() {
        guard state == .forwarding, !bodyComplete else { return }
        if collectingForm {
            let n = Int(min(bodyRemaining, Int64(inbuf.count)))
            inbuf.withUnreadBytes { formBody!.append(contentsOf: UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            inbuf.consume(n)
            bodyRemaining -= Int64(n)
            if bodyRemaining == 0 {
                bodyComplete = true
                formCollected()
            }
            return
        }
        while bodyBuffer.count < Self.maxBuffered, !inbuf.isEmpty, !bodyComplete {
            let space = Self.maxBuffered - bodyBuffer.count
            if var decoder = chunkDecoder {
                // Move the buffer out while the closure appends to it, so appending does not copy it.
                var out = ByteBuffer()
                swap(&out, &bodyBuffer)
                let result: Result<Int, HTTPParseError> = inbuf.withUnreadBytes { bytes in
                    do throws(HTTPParseError) {
                        return .success(try decoder.decode(bytes, limit: space) { out.append($0) })
                    } catch {
                        return .failure(error)
                    }
                }
                swap(&out, &bodyBuffer)
                let consumed: Int
                switch result {
                case .success(let n): consumed = n
                case .failure(let error):
                    chunkDecoder = nil
                    bodyFailed(error)
                    return
                }
                inbuf.consume(consumed)
                chunkDecoder = decoder
                if decoder.isDone { bodyComplete = true }
            } else {
                let n = Int(min(bodyRemaining, Int64(min(inbuf.count, space))))
                inbuf.withUnreadBytes { bodyBuffer.append(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
                inbuf.consume(n)
                bodyRemaining -= Int64(n)
                if bodyRemaining == 0 { bodyComplete = true }
            }
        }
        if curlReadPaused, !bodyBuffer.isEmpty || bodyComplete {
            curlReadPaused = false
            lastUpstreamProgress = DispatchTime.now().uptimeNanoseconds
            transfer?.resume()
        }
    }

    private func bodyFailed(_ e: HTTPParseError) {
        transfer?.cancel()
        transfer = nil
        bodyComplete = false
        if responseHeadSent && heldHead == nil {
            close()
        } else {
            heldHead = nil
            respond(ErrorResponse.forParseError(e), close: true)
        }
    }

    func transferNeedsBody(_ buffer: UnsafeMutableRawBufferPointer) -> BodySupply {
        if head?.expectsContinue == true, !sentContinue, !responseHeadSent {
            sentContinue = true
            send("HTTP/1.1 100 Continue\r\n\r\n")
        }
        lastUpstreamProgress = DispatchTime.now().uptimeNanoseconds
        if let form = formBody {
            let n = min(buffer.count, form.count - formOffset)
            if n == 0 { return .end }
            form.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[formOffset..<(formOffset + n)])) }
            formOffset += n
            if attempt == 1 { bodyBytesIn += Int64(n) }
            return .bytes(n)
        }
        if let r = replay, replayOffset < r.count {
            // A retry: first the bytes the rejected attempt already sent.
            let n = r.read(at: replayOffset, into: buffer)
            if n <= 0 { return .abort }
            replayOffset += Int64(n)
            return .bytes(n)
        }
        if bodyBuffer.isEmpty {
            if bodyComplete { return .end }
            curlReadPaused = true
            return .pause
        }
        let n = min(buffer.count, bodyBuffer.count)
        bodyBuffer.withUnreadBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        bodyBuffer.consume(n)
        bodyBytesIn += Int64(n)
        if let r = replay {
            r.append(UnsafeRawBufferPointer(buffer.baseAddress.map { UnsafeRawBufferPointer(start: $0, count: n) }!))
            replayOffset = r.count
        }
        if !bodyComplete, !inbuf.isEmpty {
            pumpBody()
        }
        updateReadInterest()
        return .bytes(n)
    }

    func transferRewindBody() -> Bool {
        if formBody != nil {
            formOffset = 0
            return true
        }
        guard let r = replay, !r.overflowed else { return bodyBytesIn == 0 && bodyBuffer.isEmpty }
        replayOffset = 0
        return true
    }

    func transferDidReceiveHeaderLine(_ raw: UnsafeRawBufferPointer) {
        lastUpstreamProgress = DispatchTime.now().uptimeNanoseconds
        guard !responseHeadSent else { return }  // trailers of a chunked response: hop-by-hop, dropped
        var end = raw.count
        while end > 0, raw[end - 1] == 10 || raw[end - 1] == 13 { end -= 1 }
        let line = UnsafeRawBufferPointer(rebasing: raw[0..<end])
        if line.starts(with: "HTTP/".utf8) {
            // "HTTP/1.1 200 OK": a new response (1xx ones come first and are not relayed).
            let text = String(decoding: line, as: UTF8.self)
            let parts = text.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
            responseStatus = parts.count > 1 ? Int(parts[1]) ?? 502 : 502
            responseReason = parts.count > 2 ? String(parts[2]) : reasonPhrase(responseStatus)
            responseHeaders = HTTPHeaders()
            return
        }
        if line.isEmpty {
            // With a password/Kerberos credential, libcurl answers a 401 itself and the next status line starts
            // the real response: a 401 is only final if a body (or the end) follows.
            if responseStatus >= 200, !(networkAuth.answersChallenges && (responseStatus == 401 || responseStatus == 407)) {
                commitResponseHead()
                if sniffing { decideSniffing() }
            }
            return
        }
        if line[0] == 32 || line[0] == 9 {
            // obs-fold from an old upstream: join to the previous field.
            let more = String(decoding: line, as: UTF8.self).trimmingHTTPWhitespace()
            if let last = responseHeaders.fields.last {
                responseHeaders.remove(name: last.name)
                responseHeaders.add(name: last.name, value: last.value + " " + more)
            }
            return
        }
        guard let colon = line.firstIndex(of: 58) else { return }
        let name = String(decoding: line[0..<colon], as: UTF8.self)
        let value = String(decoding: line[(colon + 1)...], as: UTF8.self).trimmingHTTPWhitespace()
        responseHeaders.add(name: name, value: String(value))
    }

    private func commitResponseHead() {
        guard !responseHeadSent, let h = head else { return }
        responseHeadSent = true
        let status = responseStatus
        responseNoBody = h.isHead || status == 204 || status == 304 || status < 200
        var out = responseHeaders.removingHopByHop()
        let lengths = out.values("content-length")
        out.remove(name: "content-length")
        var length: Int64? = nil
        // With Transfer-Encoding the upstream's Content-Length is meaningless (libcurl de-chunks the body).
        if !responseHeaders.contains("transfer-encoding"), let first = lengths.first, lengths.allSatisfy({ $0 == first }),
            let n = Int64(first), n >= 0
        {
            length = n
        }
        if responseNoBody {
            if let length, status != 204 { out.add(name: "Content-Length", value: String(length)) }
        } else if let length {
            out.add(name: "Content-Length", value: String(length))
        } else if h.minorVersion >= 1 {
            out.add(name: "Transfer-Encoding", value: "chunked")
            responseChunked = true
        } else {
            keepAlive = false  // close-delimited for an HTTP/1.0 client
        }
        out.add(name: "Via", value: context.viaValue)
        if let o = corsOrigin {
            out.remove(name: "access-control-allow-origin")
            out.add(name: "Access-Control-Allow-Origin", value: o)
            out.add(name: "Vary", value: "Origin")
        }
        if !keepAlive {
            out.add(name: "Connection", value: "close")
        } else if h.minorVersion == 0 {
            out.add(name: "Connection", value: "keep-alive")
        }
        var s = "HTTP/1.1 \(status) \(responseReason)\r\n"
        for f in out { s += "\(f.name): \(f.value)\r\n" }
        s += "\r\n"
        heldHead = s
    }

    /// Writes the held response head, if any, followed by `tail`.
    private func flushHead(then tail: String = "") {
        if var h = heldHead {
            heldHead = nil
            h += tail
            send(h)
        } else if !tail.isEmpty {
            send(tail)
        }
    }

    func transferDidReceiveBody(_ bytes: UnsafeRawBufferPointer) -> BodyAcceptance {
        lastUpstreamProgress = DispatchTime.now().uptimeNanoseconds
        if !responseHeadSent { commitResponseHead() }
        if holding {
            if sniffBuffer.count + bytes.count <= TokenRejection.lookAhead {
                sniffBuffer.append(contentsOf: bytes)
                return .accepted
            }
            // Token errors are small: a body this large is the real answer.
            releaseHeldResponse()
        }
        if channel.failed || channel.isClosed { return .abort }
        if responseNoBody { return .accepted }
        if channel.pendingCount >= Self.maxBuffered {
            curlWritePaused = true
            return .pause
        }
        loop.writeBody(bytes, head: heldHead, chunked: responseChunked) { send($0) }
        heldHead = nil
        bodyBytesOut += Int64(bytes.count)
        return channel.failed ? .abort : .accepted
    }

    func transferDidFinish(error: UpstreamError?) {
        transfer = nil
        if let error {
            if error.isClientSide || state == .closed {
                close()
                return
            }
            logger.warning("upstream failed", metadata: ["client": "\(peer)", "destination": "\(error.destination)",
                "cause": "\(error.detail.isEmpty ? error.response.message : error.detail)"])
            if responseHeadSent && heldHead == nil {
                // Headers are out: the only honest signal left is to cut the connection (truncation).
                logAccess()
                close()
            } else {
                heldHead = nil
                responseHeadSent = false
                respond(error.response, close: !bodyComplete)
                process()
                updateReadInterest()
            }
            return
        }
        if !responseHeadSent {
            if responseStatus < 200 { responseStatus = 502; responseReason = "Bad Gateway" }
            commitResponseHead()
        }
        if responseStatus == 401, networkAuth.answersChallenges, let url = upstreamURL {
            logger.warning("upstream refused the network credential", metadata: ["url": "\(url.origin)\(url.path)",
                "credential": "\(networkAuth.passwordName ?? "kerberos")"])
        }
        if holding {
            if TokenRejection.isRejection(status: responseStatus, contentType: responseHeaders.first("content-type"), body: sniffBuffer),
                tokenRejected()
            {
                return
            }
            if holding { releaseHeldResponse() }
        }
        flushHead(then: responseChunked ? "0\r\n\r\n" : "")
        finishExchange()
        process()
        updateReadInterest()
    }

    // MARK: CONNECT

    private func startTunnel(host: String, port: Int) {
        guard context.config.connectPorts.contains(port) else {
            respond(ErrorResponse(status: 403, message: "CONNECT to \(host):\(port) is not allowed",
                details: ["Port \(port) is not in [proxy] connect_ports (\(context.config.connectPorts.sorted().map(String.init).joined(separator: ", ")))."]),
                close: false)
            return
        }
        if context.config.unmatched == .deny, !context.credentials.matchesHost(host, port: port) {
            respond(ErrorResponse(status: 403, message: "Destination \(host):\(port) is not allowed",
                details: ["No credential matches it and [proxy] unmatched = \"deny\"."]), close: false)
            return
        }
        if context.credentials.matchesHost(host, port: port) {
            if let server = context.tlsServer {
                startInterception(server: server, host: host, port: port)
                return
            }
            if context.notices.first("\(host):\(port)") {
                logger.warning("CONNECT to a matched host relayed blindly: credentials cannot be applied without [tls] interception",
                    metadata: ["host": "\(host):\(port)", "hint": "run `authproxy ca init` and configure [tls], or use upgrade_to_https"])
            }
        }
        state = .tunnel
        channel.pauseReading()
        let t = Tunnel(connection: self, host: host, port: port, timeoutSeconds: context.config.upstreamTimeoutSeconds,
            idleTimeoutSeconds: context.config.tunnelIdleTimeoutSeconds)
        tunnel = t
        t.start()
    }

    /// CONNECT to a matched host: answer 200, then speak TLS to the client with a minted certificate and handle
    /// the requests inside like any other (credentials, retries, streaming).
    private func startInterception(server: TLSServer, host: String, port: Int) {
        guard let session = TLSSession(server: server, host: host) else {
            respond(ErrorResponse(status: 500, message: "Cannot start TLS for \(host):\(port)"), close: true)
            return
        }
        responseStatus = 200
        channel.write("HTTP/1.1 200 Connection Established\r\nVia: \(context.viaValue)\r\n\r\n")
        logAccess()
        head = nil
        tls = session
        intercept = (host, port)
        state = .awaitingHead
        lastProgress = DispatchTime.now().uptimeNanoseconds
        if !inbuf.isEmpty {
            // A client may send its ClientHello right behind the CONNECT.
            inbuf.withUnreadBytes { session.feed($0) }
            inbuf.removeAll()
            if case .closed = pullTLS() { return }
        }
    }

    /// The upstream socket is connected: answer 200 and hand the bytes the client already sent to it.
    func tunnelEstablished() -> ByteBuffer {
        responseStatus = 200
        channel.write("HTTP/1.1 200 Connection Established\r\nVia: \(context.viaValue)\r\n\r\n")
        let early = inbuf
        inbuf.removeAll()
        return early
    }

    func tunnelFailed(_ e: ErrorResponse) {
        tunnel = nil
        state = .awaitingHead
        respond(e, close: true)
    }

    func tunnelFinished(bytesUp: Int64, bytesDown: Int64) {
        bodyBytesIn = bytesUp
        bodyBytesOut = bytesDown
        logAccess()
        head = nil
        tunnel = nil
        close()
    }

    // MARK: responses and the end of an exchange

    private func respondLocal(status: Int, contentType: String, body: String, extraHeaders: String = "") {
        responseStatus = status
        let minor = head?.minorVersion ?? 1
        var s = "HTTP/1.1 \(status) \(reasonPhrase(status))\r\nContent-Type: \(contentType)\r\nContent-Length: \(body.utf8.count)\r\n"
        s += extraHeaders
        if let o = corsOrigin { s += "Access-Control-Allow-Origin: \(o)\r\nVary: Origin\r\n" }
        if !keepAlive { s += "Connection: close\r\n" } else if minor == 0 { s += "Connection: keep-alive\r\n" }
        s += "\r\n"
        if head?.isHead != true {
            s += body
            bodyBytesOut = Int64(body.utf8.count)
        }
        responseHeadSent = true
        send(s)
        finishExchange()
    }

    /// Answers with an ArcGIS-style JSON error.
    private func respond(_ e: ErrorResponse, close: Bool) {
        if close { keepAlive = false }
        transfer?.cancel()
        transfer = nil
        respondLocal(status: e.status, contentType: "application/json; charset=utf-8", body: e.jsonBody)
    }

    private func finishExchange() {
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

    private func logAccess() {
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
        ])
    }

    /// Half-closes after the response is flushed, then discards input until the client closes or
    /// ``lingerNanos`` pass.
    private func beginClosing() {
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

    private func drained() {
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
    private func clientEOF() {
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
    private func clientGone() {
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
