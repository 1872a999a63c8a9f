import CAuthProxyShims
import Dispatch

#if canImport(Glibc)
    import Glibc
#endif

/// One exchange with an `http://` or `https://` upstream over the proxy's own HTTP/1.1 client: a kept-alive
/// connection from the loop's ``UpstreamConnectionPool`` (or a new one from the ``Connector``: the destination or the
/// parents of its route, `deny_destinations` on every address it connects to, TLS made and verified by libcurl over
/// the dialed socket and read and written through ``CurlLink``), the request head written
/// from the ``UpstreamRequest`` and the client's fields, the body streamed from the delegate (chunked when its length is unknown), and
/// the response read with ``ResponseReader`` and handed to the delegate line by line and chunk by chunk, exactly
/// as ``CurlTransfer`` hands on what libcurl reads.
///
/// It exists because libcurl's per-request machinery (a handle reset and re-armed per request, a `poll` per
/// reuse, its own buffers and callbacks) was the largest block of the proxy's CPU per request. libcurl
/// still makes every TLS connection and carries every network-authentication scheme; the choice is made with the
/// plan (``UpstreamClient``).
///
/// Failures are reported with the libcurl codes the rest of the proxy maps to answers, logs and metrics
/// (``UpstreamError``): the two clients fail the same way towards a GIS client.
///
/// What happens next (connect or send, the body flowing or paused, a resend after a dead kept-alive connection,
/// pooling or closing at the end) is decided by ``HTTP1TransferStateMachine``; this class carries it out.
///
/// Confined to the loop's queue. The delegate is `unowned(unsafe)` on the same rule as ``CurlTransfer``'s:
/// it cancels the exchange before it goes away.
final class HTTP1Transfer: UpstreamExchange {
    private let pool: UpstreamConnectionPool
    let request: UpstreamRequest
    private let target: URLTarget
    /// Host and port for error messages (made only when asked: most exchanges never need it).
    var destination: String { "\(target.urlHost):\(target.port)" }
    private unowned(unsafe) var delegate: (any UpstreamExchangeDelegate)?
    private var connection: UpstreamConnection?
    /// An https upstream: connections are TLS, made by libcurl with `trust`.
    private let tls: Bool
    private let trust: ServerTrustSettings?
    /// A `certificate` credential's, presented in the TLS handshake (connections made with it are pooled apart).
    private let certificate: ClientCertificateSettings?
    /// Connecting a new connection; nil once connected or failed.
    private var connector: Connector?
    /// The connector of a new connection to an `http` parent that gets the request in absolute form: the parent's
    /// own refusal (its 407) goes back to it for the next parent (``Connector/parentRefused(status:canMove:_:)``).
    private var failover: Connector?
    @exclusivity(unchecked) private var reader: ResponseReader
    /// What happens next (connect, send, resend, pause, end): decided by the machine, carried out here. Confined to
    /// the pool's queue and changed only by the machine's own methods, so without the dynamic exclusivity check.
    @exclusivity(unchecked) private var machine: HTTP1TransferStateMachine
    /// ``pumpBody()`` is running: a delegate call inside it that would start it again leaves it to the loop.
    private var pumping = false
    /// A `password` that allows Digest: the upstream's 401 is answered here (``DigestLogin``), not by the client.
    private var digest: DigestLogin?

    var answeredChallenge: String? { digest?.loggedInWith }

    init(
        pool: UpstreamConnectionPool, request: UpstreamRequest, target: URLTarget,
        affinity: Affinity = .shared, delegate: any UpstreamExchangeDelegate
    ) {
        self.pool = pool
        self.affinity = affinity
        self.request = request
        self.target = target
        self.delegate = delegate
        reader = Self.reader(for: request, affinity: affinity)
        machine = HTTP1TransferStateMachine(hasBody: request.bodyLength != nil)
        tls = target.scheme == "https"
        trust = tls ? request.network.trust : nil
        certificate = tls ? request.network.certificate : nil
        digest = DigestLogin(network: request.network, fields: request.fields, target: target)
    }

    private static func reader(for request: UpstreamRequest, affinity: Affinity) -> ResponseReader {
        ResponseReader(
            isHeadRequest: request.method == "HEAD", reuseAfterBodiless: affinity.isOwned,
            upgradeRequested: request.upgrade != nil)
    }

    deinit {
        // Backstop: an exchange dropped without cancel() must not leave its connection pointing at it.
        connection?.close()
    }

    /// Whose connections it may use (``Affinity``): those of one client connection that authenticates them itself.
    private let affinity: Affinity
    /// Direct, or the parent the connection goes through: at the start the first one to try, then the one the
    /// connector reached.
    private var route: Route = .direct
    private var key: UpstreamConnectionPool.Key {
        .init(
            host: target.host, port: target.port, affinity: affinity, route: route, tls: tls, trust: trust,
            certificate: certificate)
    }

    /// Plain http to an `http` parent goes in absolute form on a connection to the parent, unless it is a
    /// WebSocket handshake (a parent may not relay an Upgrade) or the destination takes a `Proxy-Authorization` of
    /// its own (a gateway's): only a CONNECT keeps those from the parent.
    private var absoluteForm: Bool {
        !tls && request.upgrade == nil && !request.fields.forwardsProxyAuthorization
    }

    func start() {
        assertOnQueue(pool.queue)
        if let r = request.parentRoute, let first = r.routing.health.order(r.candidates).first {
            route = absoluteForm && r.routing.ownClientForwards(through: first) ? .forwardedBy(first) : .parent(first)
        }
        let pooled = pool.take(key)
        if machine.start(pooledConnection: pooled != nil) == .sendHead, let c = pooled {
            attach(c)
            sendHead()
        } else {
            connectNew()
        }
    }

    func resume() {
        assertOnQueue(pool.queue)
        let r = machine.resume()
        if r.response {
            // Reading resumes with a look at the socket on the next turn, which takes the held bytes first.
            connection?.channel.resumeReading()
        }
        if r.body { pumpBody() }
    }

    func cancel() {
        assertOnQueue(pool.queue)
        guard machine.end() else { return }
        delegate = nil
        connector?.cancel()
        connector = nil
        failover = nil
        // Cut inside an exchange: what is left of it on the connection could never be told apart from the next.
        connection?.close()
        connection = nil
    }

    // MARK: connecting

    /// A new connection from the ``Connector``: plain, or TLS and any parent's CONNECT made by libcurl.
    private func connectNew() {
        let c = Connector(
            multi: pool.multi, urlHost: target.urlHost, port: target.port, tls: tls, trust: trust,
            certificate: certificate, timeoutSeconds: request.timeoutSeconds,
            denyDestinations: request.denyDestinations, keepAlive: true,
            absoluteForm: absoluteForm)
        c.trace = request.trace
        connector = c
        c.start(request.parentRoute.map { TunnelRoute.parents($0) } ?? .direct, connectorDone(c))
    }

    /// What the connector's outcome does, first or after a parent's refusal. Not called after cancel() (which
    /// cancels the connector): the exchange is still on when it runs.
    private func connectorDone(_ c: Connector) -> (Result<Connector.Connected, UpstreamError>) -> Void {
        let bound = LoopBound(self, queue: pool.queue)
        return { result in
            let me = bound.value
            me.connector = nil
            switch result {
            case .success(let link):
                // The parent that carried it, or direct after every parent failed (a route ending in DIRECT).
                me.route = link.route
                me.failover = link.forwarding ? c : nil
                me.connected(UpstreamConnection(channel: link.channel, key: me.key, pool: me.pool))
            case .failure(let error):
                me.failover = nil
                me.fail(error)
            }
        }
    }

    /// The `http` parent answered the request in absolute form with its own 407 (no login, or a refused one): it
    /// never reaches the client. The connector records it and tries the next parent, the request going again
    /// (its body rewound) when it can; otherwise the answer names the parent.
    private func parentRefused(_ parent: ParentProxy) {
        guard !machine.isEnded else { return }
        detach()?.close()
        reader = Self.reader(for: request, affinity: affinity)
        machine.resending()
        let hasBody = request.bodyLength != nil
        let canMove: () -> Bool = { [unowned self] in !hasBody || delegate?.transferRewindBody() == true }
        if let c = failover {
            failover = nil
            connector = c
            c.parentRefused(status: 407, canMove: canMove, connectorDone(c))
            return
        }
        // A kept-alive connection whose parent now refuses: the answer names it (the next request starts over).
        request.parentRoute?.routing.health.failed(parent, cause: .auth)
        var error = UpstreamError(
            cause: .other("parent refused"), detail: "", destination: destination,
            timeoutSeconds: request.timeoutSeconds)
        let routing = request.parentRoute?.routing
        error.failedAtParents(
            .parent(
                ParentFailure(parent: parent, cause: .auth, connectStatus: 407, credential: routing?.credentialName)),
            pac: nil)
        fail(error)
    }

    /// A new connection is up: the request goes out on it.
    private func connected(_ c: UpstreamConnection) {
        machine.connected()
        attach(c)
        c.channel.resumeReading()
        sendHead()
    }

    private func attach(_ c: UpstreamConnection) {
        connection = c
        c.user = self
    }

    /// Lets go of the connection (the caller closes or pools it).
    private func detach() -> UpstreamConnection? {
        let c = connection
        c?.user = nil
        connection = nil
        return c
    }

    // MARK: the request

    /// Writes the request head: `METHOD target HTTP/1.1`, `Host`, the client's forwarded fields
    /// (``HTTPHeaders/forEachForwardedField(_:)``), `Via`, and the body's framing.
    private func sendHead() {
        guard let c = connection else { return }
        var h = pool.headBuffer
        pool.headBuffer = ByteBuffer()
        h.removeAll()
        h.append(request.method)
        h.append(" ")
        if case .forwardedBy = route {
            // Absolute form (RFC 9112 §3.2.2): the parent reads the destination from the request line.
            h.append("http://")
            h.append(target.urlHost)
            if !target.isDefaultPort {
                h.append(":")
                h.append(String(target.port))
            }
        }
        h.append(target.pathAndQuery)
        h.append(" HTTP/1.1\r\nHost: ")
        h.append(target.urlHost)
        if !target.isDefaultPort {
            h.append(":")
            h.append(String(target.port))
        }
        h.append("\r\n")
        request.fields.forEachForwardedField { name, value in
            h.append(name)
            if value.isEmpty {
                h.append(":\r\n")
            } else {
                h.append(": ")
                h.append(value)
                h.append("\r\n")
            }
        }
        if let upgrade = request.upgrade {
            // A WebSocket handshake: the two hop-by-hop fields it needs go to this hop too (RFC 9110 §7.8).
            h.append("Upgrade: ")
            h.append(upgrade)
            h.append("\r\nConnection: Upgrade\r\n")
        }
        // A Basic-only password, as libcurl sends it: at once, and not over a client's own Authorization. One that
        // allows Digest answers the 401 (``DigestLogin``) below.
        if case .some(let pw) = request.network.password, pw.isBasicOnly, request.fields.first("authorization") == nil,
            let basic = pw.basicAuthorization(overHTTPS: tls)
        {
            h.append("Authorization: ")
            h.append(basic)
            h.append("\r\n")
        }
        if digest != nil,
            let login = pool.digestSessions.with({ cache in
                digest?.authorization(
                    method: request.method, uri: target.pathAndQuery, hasBody: request.bodyLength != nil,
                    overHTTPS: tls, cache: &cache)
            })
        {
            h.append("Authorization: ")
            h.append(login)
            h.append("\r\n")
        }
        if case .forwardedBy(let parent) = route,
            let login = request.parentRoute?.routing.proxyAuthorization(for: parent)
        {
            h.append("Proxy-Authorization: ")
            h.append(login)
            h.append("\r\n")
        }
        if let via = request.via {
            h.append("Via: ")
            h.append(via)
            h.append("\r\n")
        }
        if let n = request.bodyLength {
            if n < 0 {
                h.append("Transfer-Encoding: chunked\r\n")
            } else {
                h.append("Content-Length: ")
                h.append(String(n))
                h.append("\r\n")
            }
        }
        h.append("\r\n")
        machine.sendingHead()
        h.withUnreadBytes { c.channel.write($0) }
        h.removeAll()
        pool.headBuffer = h
        // A write that failed at once may have moved the exchange to a new connection
        // (``resend(rewindBody:after:)``), which sends its own head when it is connected.
        guard connection === c, machine.headWritten() else { return }
        pumpBody()
    }

    /// Moves request-body bytes from the delegate to the socket while the socket takes them.
    private func pumpBody() {
        guard !pumping else { return }
        pumping = true
        defer { pumping = false }
        let chunked = (request.bodyLength ?? 0) < 0
        let buf = pool.sendBuffer
        // Room before the data for a chunk-size line, and after it for its CRLF.
        let space = chunked ? UnsafeMutableRawBufferPointer(rebasing: buf[24..<(buf.count - 2)]) : buf
        while machine.bodyFlows, let c = connection, c.channel.pendingCount <= SocketChannel.lowWater {
            let supply = delegate?.transferNeedsBody(space) ?? .abort
            if machine.isEnded { return }
            switch supply {
            case .bytes(let n):
                guard n > 0 else { continue }
                if chunked {
                    let base = buf.baseAddress!.assumingMemoryBound(to: UInt8.self)
                    var digits = 1
                    while digits < 16, n >> (4 * digits) != 0 { digits += 1 }
                    let k = EventLoop.chunkSizeLine(n, into: base + 24 - (digits + 2))
                    base[24 + n] = 13
                    base[24 + n + 1] = 10
                    c.channel.write(UnsafeRawBufferPointer(start: base + 24 - k, count: k + n + 2))
                } else {
                    c.channel.write(UnsafeRawBufferPointer(rebasing: buf[0..<n]))
                }
            case .end:
                if chunked { c.channel.write(UnsafeRawBufferPointer(start: Self.lastChunk.utf8Start, count: 5)) }
                machine.bodyEnded()
            case .pause:
                machine.bodyPaused()
            case .abort:
                fail(.requestBody, "the request body could not be read")
            }
        }
    }

    private static let lastChunk: StaticString = "0\r\n\r\n"
    /// The most plaintext one TLS record carries.
    private static let fullTLSRecord = 16 * 1024

    func connectionDrained() {
        guard !machine.isEnded else { return }
        pumpBody()
    }

    func connectionWriteFailed(_ error: Int32) {
        guard !machine.isEnded else { return }
        if case .resend(let rewind) = machine.writeFailed(responseStarted: reader.receivedAny),
            resend(rewindBody: rewind, after: .writeFailure)
        {
            return
        }
        if machine.isEnded { return }
        // The upstream may have answered before it stopped reading (a 413 to an upload): its answer is read,
        // and the read side reports the reset or the end.
        // Do not wait for the read source alone: a reset arriving while libdispatch re-arms the descriptor's write
        // source can leave the descriptor out of epoll, and the read event never comes (the same loss
        // ``SocketChannel/resumeReading()`` guards against). The exchange then hung until the client gave up (an
        // upload whose upstream reset it: no answer, no log line, in 1 of several CI runs). Look at the socket on
        // the next turn; reading until EAGAIN makes a spurious look harmless.
        let bound = LoopBound(self, queue: pool.queue)
        pool.queue.async {
            let me = bound.value
            guard me.machine.readsResponse, me.connection != nil else { return }
            me.connectionReadable()
        }
    }

    // MARK: the response

    private enum Outcome {
        case needMore
        case paused
        case complete
        case failed(UpstreamFailure, String)
        case invalid(ResponseReader.Failure)
        case cancelled
        case switched
        /// The `http` parent's own 407 to a request in absolute form (``parentRefused(_:)``).
        case parentRefused(ParentProxy)
        /// A 401 the Digest login answers was read to its end (``answerChallenge(extraBytes:)``).
        case answerChallenge
    }

    func connectionReadable() {
        guard machine.readsResponse, let c = connection else { return }
        let scratch = pool.readBuffer
        while true {
            if !c.inbuf.isEmpty {
                // Moved out while the delegate runs: it may cancel the exchange, which closes the connection and
                // empties its buffer, and must not do that to bytes being read.
                var held = ByteBuffer()
                swap(&held, &c.inbuf)
                let (consumed, outcome) = held.withUnreadBytes { process($0) }
                if case .cancelled = outcome { return }
                held.consume(consumed)
                c.inbuf = held
                if !settle(outcome, leftover: c.inbuf.count) { return }
            }
            switch c.channel.read(into: scratch) {
            case .bytes(let n):
                if !c.inbuf.isEmpty {
                    c.inbuf.append(UnsafeRawBufferPointer(rebasing: scratch[0..<n]))
                    continue
                }
                let (consumed, outcome) = process(UnsafeRawBufferPointer(rebasing: scratch[0..<n]))
                if case .cancelled = outcome { return }
                if consumed < n, case .complete = outcome {
                    // Bytes after the response: the connection is not used again (see settle).
                } else if consumed < n {
                    c.inbuf.append(UnsafeRawBufferPointer(rebasing: scratch[consumed..<n]))
                }
                if !settle(outcome, leftover: n - consumed) { return }
                // A short read emptied the socket: wait for the next event rather than read EAGAIN. A TLS layer
                // returns one record per read: after a full-size record (16 KiB of a longer body) the next is
                // likely there already, so reading goes on; otherwise only when the layer holds more bytes than
                // the socket shows.
                if n < scratch.count, n < Self.fullTLSRecord || c.channel.secure == nil,
                    !(c.channel.secure?.hasBufferedInput ?? false)
                {
                    return
                }
            case .wouldBlock:
                return
            case .eof:
                endOfInput(resetError: nil)
                return
            case .error(let e):
                endOfInput(resetError: e)
                return
            }
        }
    }

    /// Acts on what ``process(_:)`` ended with; true when reading should go on.
    private func settle(_ outcome: Outcome, leftover: Int) -> Bool {
        switch outcome {
        case .needMore:
            return true
        case .paused:
            machine.responseWasPaused()
            connection?.channel.pauseReading()
            return false
        case .complete:
            if leftover > 0 { connection?.inbuf.removeAll() }
            complete(extraBytes: leftover > 0)
            return false
        case .failed(let code, let detail):
            fail(code, detail)
            return false
        case .invalid(let why):
            fail(.protocolError, "", invalidResponse: "\(why)")
            return false
        case .cancelled:
            return false
        case .switched:
            switchedProtocols()
            return false
        case .parentRefused(let parent):
            parentRefused(parent)
            return false
        case .answerChallenge:
            if leftover > 0 { connection?.inbuf.removeAll() }
            answerChallenge(extraBytes: leftover > 0)
            return false
        }
    }

    /// The upstream answered the upgrade with `101`: the exchange ends and its connection, with the bytes that
    /// came after the head, goes to the delegate, which relays it from now on (it is never pooled).
    private func switchedProtocols() {
        guard !machine.isEnded, let c = detach() else { return }
        _ = machine.end()
        let d = delegate
        delegate = nil
        var leftover = ByteBuffer()
        swap(&leftover, &c.inbuf)
        // The connection object goes away with this exchange: nothing may report to it (its owner reference is
        // unowned). The delegate makes itself the owner, or closes the channel.
        c.channel.owner = nil
        c.channel.pauseReading()
        guard let d else {
            c.channel.close()
            return
        }
        d.transferSwitchedProtocols(channel: c.channel, leftover: leftover)
    }

    /// Runs the reader over `input`, handing head lines and body bytes to the delegate; returns how many bytes
    /// were consumed and why it stopped.
    private func process(_ input: UnsafeRawBufferPointer) -> (Int, Outcome) {
        var at = 0
        while true {
            let rest = UnsafeRawBufferPointer(rebasing: input[at...])
            let step: ResponseReader.Step
            do throws(ResponseReader.Failure) {
                step = try reader.next(rest)
            } catch {
                return (at, .invalid(error))
            }
            switch step {
            case .headLine(let n):
                if reader.status == 407, case .forwardedBy(let parent) = route {
                    return (at, .parentRefused(parent))
                }
                if reader.status == 401, digest != nil {
                    let line = UnsafeRawBufferPointer(rebasing: rest[0..<n])
                    at += n
                    if digest!.hold(line), !decideOnChallenge() { return (at, .cancelled) }
                    continue
                }
                delegate?.transferDidReceiveHeaderLine(UnsafeRawBufferPointer(rebasing: rest[0..<n]))
                if machine.isEnded { return (at, .cancelled) }
                at += n
            case .framing(let n):
                at += n
            case .body(let n):
                if digest?.answering == true {
                    // The body of a 401 being answered: nobody reads it.
                    reader.bodyDelivered(n)
                    at += n
                    continue
                }
                switch delegate?.transferDidReceiveBody(UnsafeRawBufferPointer(rebasing: rest[0..<n])) ?? .abort {
                case .accepted:
                    if machine.isEnded { return (at, .cancelled) }
                    reader.bodyDelivered(n)
                    at += n
                case .pause:
                    if machine.isEnded { return (at, .cancelled) }
                    return (at, .paused)
                case .abort:
                    if machine.isEnded { return (at, .cancelled) }
                    return (at, .failed(.clientGone, "the client went away"))
                }
            case .complete:
                return (at, digest?.answering == true ? .answerChallenge : .complete)
            case .needMore:
                return (at, .needMore)
            case .switched:
                return (at, .switched)
            }
        }
    }

    private func endOfInput(resetError: Int32?) {
        guard !machine.isEnded else { return }
        var loss = machine.inputEnded(
            responseStarted: reader.receivedAny, writesPending: (connection?.channel.pendingCount ?? 0) > 0,
            resendable: request.resendable)
        if case .resend(let rewind) = loss {
            if resend(rewindBody: rewind, after: .endOfInput) { return }
            loss = .endResponse
        }
        if machine.isEnded { return }
        if loss == .refuseResend {
            var error = UpstreamError(
                cause: resetError == nil ? .nothing : .reset, detail: "",
                destination: destination, timeoutSeconds: request.timeoutSeconds)
            error.notResent = request.method
            fail(error)
            return
        }
        if let e = resetError {
            fail(.reset, "Recv failure: \(String(cString: strerror(e)))")
            return
        }
        do throws(ResponseReader.Failure) {
            try reader.endOfInput()
            if digest?.answering == true {
                answerChallenge(extraBytes: true)
                return
            }
            complete(extraBytes: true)
        } catch .nothing {
            fail(.nothing, "Empty reply from server")
        } catch {
            fail(.partial, "The upstream closed the connection inside the response")
        }
    }

    private enum LossPoint { case writeFailure, endOfInput }

    // MARK: Digest

    /// The held 401 head ended: answered (its body is then dropped, ``answerChallenge(extraBytes:)``), or handed to
    /// the delegate line by line. False when the delegate ended the exchange meanwhile.
    private func decideOnChallenge() -> Bool {
        guard digest != nil else { return true }
        let hasBody = request.bodyLength != nil
        if pool.digestSessions.with({ cache in digest!.decide(hasBody: hasBody, overHTTPS: tls, cache: &cache) }) {
            return true
        }
        for line in digest!.releaseHead() {
            line.withUnsafeBytes { delegate?.transferDidReceiveHeaderLine($0) }
            if machine.isEnded { return false }
        }
        return true
    }

    /// Sends the request again with the answer to the 401 just read: on the same connection when it stays open
    /// and the request went out whole, else on a new one; a body is rewound first (the client connection holds
    /// it up to `max_replay_bytes`). A body that cannot be sent again fails the exchange, saying so.
    private func answerChallenge(extraBytes: Bool) {
        guard !machine.isEnded else { return }
        let c = detach()
        let reusable = c.map { reader.reusable && !extraBytes && $0.inbuf.isEmpty && !$0.channel.failed } ?? false
        if request.bodyLength != nil, !(delegate?.transferRewindBody() ?? false) {
            c?.close()
            fail(
                .other("login not sent"),
                "the upstream asks for a Digest login and the request body cannot be sent again: it is larger than "
                    + "max_replay_bytes")
            return
        }
        if machine.isEnded {
            c?.close()
            return
        }
        reader = Self.reader(for: request, affinity: affinity)
        if machine.answeringChallenge(reuseConnection: reusable), let c {
            attach(c)
            sendHead()
        } else {
            c?.close()
            connectNew()
        }
    }

    /// Sends the request again on a new connection, as the machine decided after a kept-alive connection died
    /// before any byte of the answer; a body is rewound first. False when that cannot be done (the body cannot be
    /// rewound): the machine is told, and the loss is handled as if no resend had been allowed.
    private func resend(rewindBody: Bool, after point: LossPoint) -> Bool {
        if rewindBody, !(delegate?.transferRewindBody() ?? false) {
            _ = machine.bodyNotRewound(afterWriteFailure: point == .writeFailure)
            return false
        }
        if machine.isEnded { return true }
        machine.resending()
        detach()?.close()
        connectNew()
        return true
    }

    /// The response is complete: pool the connection if it can carry another request, then report success.
    /// When the answer came before the request body was all sent (an early error), the connection is closed.
    private func complete(extraBytes: Bool = false) {
        guard !machine.isEnded else { return }
        let c = detach()
        let reusable = c.map { reader.reusable && !extraBytes && $0.inbuf.isEmpty && !$0.channel.failed } ?? false
        if machine.responseComplete(reusable: reusable), let c {
            c.exchanges += 1
            pool.put(c, now: DispatchTime.now().uptimeNanoseconds)
        } else {
            c?.close()
        }
        let d = delegate
        delegate = nil
        d?.transferDidFinish(error: nil)
    }

    private func fail(
        _ cause: UpstreamFailure, _ detail: String, invalidResponse: String? = nil
    ) {
        var error = UpstreamError(
            cause: cause, detail: detail, destination: destination, timeoutSeconds: request.timeoutSeconds)
        error.invalidResponse = invalidResponse
        fail(error)
    }

    private func fail(_ error: UpstreamError) {
        guard machine.end() else { return }
        detach()?.close()
        let d = delegate
        delegate = nil
        d?.transferDidFinish(error: error)
    }
}
