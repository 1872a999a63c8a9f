/// Events from the client side: bytes, request heads, local answers, EOF, resets, shutdown, CONNECT.
extension ExchangeStateMachine {
    /// Client bytes arrived, or response bytes left: the client is alive.
    mutating func clientProgress(now: UInt64) {
        lastClientProgress = now
    }

    /// What to do with buffered input.
    enum InputStep: Equatable {
        case wait
        case parseHead
        /// Move request-body bytes towards the upstream.
        case pumpBody
        /// The connection is closing: input is read and dropped.
        case discard
    }

    /// Called whenever input arrived or an exchange ended; `buffered` is the unparsed input.
    mutating func nextInputStep(buffered: Int, now: UInt64) -> InputStep {
        switch state {
        case .awaitingHead(let started):
            if buffered == 0 {
                if started != nil { state = .awaitingHead(headStarted: nil) }
                return .wait
            }
            if started == nil { state = .awaitingHead(headStarted: now) }
            return .parseHead
        case .exchange(let e):
            return e.request == .complete ? .wait : .pumpBody
        case .closing:
            return .discard
        case .tlsHandshake, .tunnel, .closed:
            return .wait
        }
    }

    /// Whether input may still become requests: not once the connection is closing (input is dropped) or closed.
    var takesRequests: Bool {
        switch state {
        case .closing, .closed: return false
        default: return true
        }
    }

    enum ReadInterest: Equatable { case read, pause, leave }

    /// Whether a request body is being read: then a read event is read to its end, since a reset behind the
    /// body's bytes may not be reported again (the client's socket, the transfer and a replay file would stay
    /// until the idle timeout).
    var readsBody: Bool {
        guard case .exchange(let e) = state else { return false }
        return e.request != .complete
    }

    /// Whether to keep reading from the client: not while `buffered` (unparsed input, or ciphertext not yet
    /// decrypted) is at `limit` (back-pressure on a client sending faster than the upstream takes), always
    /// while closing (input is discarded), and not at all after the client half-closed or once a tunnel owns
    /// the socket.
    func readInterest(buffered: Int, limit: Int) -> ReadInterest {
        switch state {
        case .closed, .tunnel: return .leave
        case .closing: return .read
        case .exchange(let e) where e.clientHalfClosed: return .leave
        default: return buffered < limit ? .read : .pause
        }
    }

    /// Facts about a parsed request head the lifecycle depends on.
    struct RequestFacts: Equatable {
        var isHead = false
        var minorVersion = 1
        var expectsContinue = false
        /// The client asked for (or allows) keep-alive.
        var keepAlive = true
        /// A body follows the head.
        var hasBody = false
    }

    /// A request head was parsed: its exchange begins. Returns the exchange's serial.
    @discardableResult
    mutating func requestBegan(_ r: RequestFacts, shuttingDown: Bool, now: UInt64) -> Int {
        exchanges += 1
        state = .exchange(
            Exchange(
                serial: exchanges, started: now, isHead: r.isHead, clientMinorVersion: r.minorVersion,
                expectsContinue: r.expectsContinue, keepAlive: r.keepAlive && !shuttingDown,
                request: r.hasBody ? .streaming : .complete))
        return exchanges
    }

    /// Input that is not a request (unparseable, or no head in time): an exchange without a request begins,
    /// to be answered with an error and a close.
    mutating func requestFailed(now: UInt64) {
        exchanges += 1
        state = .exchange(
            Exchange(
                serial: exchanges, started: now, isHead: false, clientMinorVersion: 1,
                expectsContinue: false, keepAlive: false, request: .complete))
    }

    /// The proxy answers the exchange itself (an error, its own endpoint, a refusal). `close` ends the
    /// connection after the answer, and so does a request body not read to its end. Returns whether the answer
    /// says keep-alive; nil when there is no exchange (the connection closed meanwhile).
    mutating func answerLocally(status: Int, close: Bool) -> Bool? {
        withExchange { e in
            if close || e.request != .complete { e.keepAlive = false }
            e.status = status
            e.upstream = .finished
            e.response = .complete
            return e.keepAlive
        }
    }

    /// Whether to send `100 Continue` now: once per exchange, for a client that asked, before any response.
    mutating func continueDue() -> Bool {
        withExchange { e in
            guard e.expectsContinue, !e.continueSent, e.response == .none else { return false }
            e.continueSent = true
            return true
        } ?? false
    }

    /// The form body is collected whole; the transfer can start.
    mutating func formCollected() {
        withExchange { e in e.request = .complete }
    }

    /// The request body is to be collected whole (a form that will carry the token). False when it is
    /// already complete.
    mutating func collectForm() -> Bool {
        withExchange { e in
            guard e.request != .complete else { return false }
            e.request = .collectingForm
            return true
        } ?? false
    }

    /// Request-body bytes were moved into the buffer the upstream reads from (`pending` bytes now wait there).
    /// Returns true when the paused transfer must be resumed.
    mutating func requestBodyMoved(complete: Bool, pending: Int, now: UInt64) -> Bool {
        withExchange { e in
            if complete { e.request = .complete }
            guard case .transferring(var t) = e.upstream, t.waitingForBody, pending > 0 || complete else {
                return false
            }
            t.waitingForBody = false
            t.lastProgress = now
            e.upstream = .transferring(t)
            return true
        } ?? false
    }

    /// The client's send queue shrank to `pending` bytes. True when the transfer paused for it must resume.
    mutating func clientDrained(pending: Int, now: UInt64) -> Bool {
        lastClientProgress = now
        let resumeBelow = limits.maxBuffered / 2
        return withTransfer { t in
            guard t.pausedForClient, pending < resumeBelow else { return false }
            t.pausedForClient = false
            t.lastProgress = now
            return true
        } ?? false
    }

    /// What ending the exchange leads to.
    enum Ending: Equatable {
        /// Wait for the next request (one may already be buffered).
        case awaitNext
        /// Half-close once the response is flushed, then linger (``State/closing(since:)``).
        case close
        /// There was no exchange (the connection closed while answering).
        case none
    }

    /// The response is complete (or the exchange answered): keep the connection or close it.
    mutating func endExchange(shuttingDown: Bool, now: UInt64) -> Ending {
        guard case .exchange(let e) = state else { return .none }
        if !e.keepAlive || e.request != .complete || shuttingDown || e.clientHalfClosed {
            state = .closing(since: now)
            return .close
        }
        state = .awaitingHead(headStarted: nil)
        lastClientProgress = now
        return .awaitNext
    }

    enum EOFStep: Equatable {
        /// The tunnel handles it.
        case tunnel
        /// A complete request is still answered; stop reading (the client only half-closed).
        case halfClosed
        /// The rest of the last response is still going out: stop reading, the linger check closes.
        case pauseReading
        /// The client is gone: close.
        case gone
    }

    /// The client sent EOF. It may only have half-closed after sending its request, so a complete request still
    /// gets its answer; anything incomplete is abandoned. A client that is really gone shows up as a failed
    /// write, which cancels the transfer.
    mutating func clientEOF(pendingOutput: Int) -> EOFStep {
        switch state {
        case .tunnel:
            return .tunnel
        case .exchange(var e) where e.request == .complete:
            e.keepAlive = false
            e.clientHalfClosed = true
            state = .exchange(e)
            return .halfClosed
        case .closing where pendingOutput > 0:
            return .pauseReading
        default:
            return .gone
        }
    }

    enum GoneStep: Equatable {
        case tunnel
        /// Close; when `logStatus` is set the exchange in progress is logged with it first.
        case close(logStatus: Int?)
    }

    /// The client closed or reset its connection: whatever is in flight is cancelled.
    mutating func clientGone() -> GoneStep {
        switch state {
        case .tunnel:
            return .tunnel
        case .exchange(let e):
            // 499 (client closed request) unless the answer had begun.
            let started: Bool
            switch e.response {
            case .streaming, .complete: started = true
            default: started = false
            }
            state = .closed
            return .close(logStatus: started ? e.status : 499)
        default:
            state = .closed
            return .close(logStatus: nil)
        }
    }

    /// The connection is being closed now (by the connection itself): nothing more happens on it.
    mutating func closed() {
        state = .closed
    }

    /// Shutdown began. A busy connection answers with `Connection: close` and closes after its exchange. An idle
    /// one is not closed at once: a request the client sent just before it could see a close would meet a reset.
    /// It takes requests (each answered with `Connection: close`) for ``Limits/shutdownQuiet``, then the tick
    /// closes it (``TimerStep/closeForShutdown``); blind tunnels run on until the grace period ends.
    mutating func shutdownRequested(now: UInt64) {
        guard shutdownSince == nil else { return }
        shutdownSince = now
        withExchange { e in e.keepAlive = false }
    }

    /// An idle connection closes for the shutdown: half-closed and lingering like after a last response, so a
    /// request arriving meanwhile is read and dropped (the client sees EOF and may retry elsewhere), not reset.
    mutating func closingForShutdown(now: UInt64) {
        state = .closing(since: now)
    }

    /// What the end of the grace period does to a connection still open.
    enum GraceStep: Equatable {
        /// Nothing in flight: close.
        case close
        /// A request whose answer has not begun: answer 503 (logged like any answer), then close.
        case answerUnavailable
        /// The answer had begun and is cut: log the exchange with `logStatus`, then close.
        case cut(logStatus: Int)
        /// A blind tunnel: end it (its access line is logged), then close.
        case tunnel
    }

    /// The grace period is over: every exchange still in flight ends now, and each gets its access-log line.
    mutating func graceExpired() -> GraceStep {
        switch state {
        case .exchange(var e):
            switch e.response {
            case .streaming, .complete:
                state = .closed
                return .cut(logStatus: e.status)
            default:
                e.keepAlive = false
                state = .exchange(e)
                return .answerUnavailable
            }
        case .tunnel:
            return .tunnel
        default:
            state = .closed
            return .close
        }
    }

    // MARK: CONNECT

    /// A blind tunnel starts for the exchange (the CONNECT is answered when the upstream is connected).
    mutating func tunnelStarted() {
        guard case .exchange(var e) = state else { return }
        e.upstream = .finished
        e.status = 200
        state = .tunnel(e)
    }

    /// The tunnel could not be opened: the CONNECT is answered with an error (the exchange is back).
    mutating func tunnelFailed() {
        guard case .tunnel(let e) = state else { return }
        state = .exchange(e)
    }

    /// The upstream answered the exchange's WebSocket handshake with `101`: the connection becomes a two-way byte
    /// relay (the tunnel state: its own idle timeout, half-close and back-pressure), and the exchange is kept for
    /// the access-log line written when the relay ends. False when there is no exchange (the client went away).
    mutating func upgraded() -> Bool {
        guard case .exchange(var e) = state else { return false }
        e.status = 101
        e.upstream = .finished
        e.keepAlive = false
        state = .tunnel(e)
        return true
    }

    /// Inside a CONNECT to a matched host (answered 200, waiting for its first bytes in ``State/tlsHandshake``),
    /// the client began TLS and no interception applies: a blind tunnel relays it, with an exchange for the
    /// CONNECT's access-log line (begun at `started`).
    mutating func tunnelAfterFirstBytes(started: UInt64) {
        guard case .tlsHandshake = state else { return }
        exchanges += 1
        var e = Exchange(
            serial: exchanges, started: started, isHead: false, clientMinorVersion: 1, expectsContinue: false,
            keepAlive: false, request: .complete)
        e.upstream = .finished
        e.status = 200
        state = .tunnel(e)
    }

    /// Inside a CONNECT to a matched host, the first bytes are neither TLS nor HTTP (or TLS no rule lets through): an
    /// exchange without a request begins, to be answered with an error and a close (a matched host never becomes
    /// a raw tunnel past `connect_ports`).
    mutating func tunnelContentRefused(started: UInt64) {
        guard case .tlsHandshake = state else { return }
        exchanges += 1
        state = .exchange(
            Exchange(
                serial: exchanges, started: started, isHead: false, clientMinorVersion: 1,
                expectsContinue: false, keepAlive: false, request: .complete))
    }

    /// CONNECT to an intercepted host was answered 200: the exchange ends and the TLS handshake begins.
    mutating func interceptionStarted(now: UInt64) {
        guard exchange != nil else { return }
        state = .tlsHandshake(since: now)
        lastClientProgress = now
    }

    /// The TLS handshake with the client finished: requests may come.
    mutating func handshakeFinished(now: UInt64) {
        guard case .tlsHandshake = state else { return }
        state = .awaitingHead(headStarted: nil)
        lastClientProgress = now
    }
}
