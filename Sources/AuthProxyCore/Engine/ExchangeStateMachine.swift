/// The life of one client connection and of the exchange in progress on it, as a value: every decision about
/// what happens next (answer, close, pause, resume, hold a response to look for a token error, retry, time
/// out) is taken here, from events the connection reports, and comes back as an action for the connection to
/// carry out. Nothing here touches a socket, libcurl, OpenSSL or Dispatch, so the lifecycle is unit-tested
/// event by event (`Tests/AuthProxyCoreTests/Engine/`), with time passed in as `now` (uptime nanoseconds).
///
/// The bytes themselves (input buffer, request-body buffer, held response bytes, the replay copy) stay with
/// the connection; the machine is told their sizes where a decision depends on them.
///
/// One exchange at a time: a pipelined request waits in the input buffer until the one before it has ended.
///
/// The exchange is composed of sub-machines, each with its own state and events, one per file, as
/// async-http-client composes its connection pool's: ``RequestBody`` (reading the request body),
/// ``Upstream`` (the route, the token, the attempt in progress and its retries), ``Response`` (the answer and
/// its hold while looking for a token error) and ``Timers`` (the connection's clocks and deadlines). This
/// type holds the connection's phase (``State``) and decides across them.
struct ExchangeStateMachine: Equatable {
    /// Time limits and buffer sizes, set when the connection is made and again by the first exchange after a
    /// configuration reload.
    struct Limits: Equatable {
        /// A request head (or a TLS handshake) must arrive within this once started.
        var headerTimeout: UInt64
        /// A kept-alive connection may wait this long for its next request; a client that stops reading its
        /// response, or sending its body, is cut after this long.
        var idleTimeout: UInt64
        /// An upstream that neither sends nor takes bytes for this long (while we are ready for it) fails.
        var upstreamTimeout: UInt64
        /// After the last response, how long the half-closed connection waits with no input before closing.
        var linger: UInt64
        /// The longest a half-closed connection goes on reading and dropping input that keeps coming (the rest of an
        /// upload the upstream answered early), as nginx's `lingering_time`.
        var lingerTotal: UInt64
        /// Response bytes queued for the client above which the upstream transfer is paused.
        var maxBuffered: Int
        /// After shutdown began, how long an idle kept-alive connection still takes a request (answered with
        /// `Connection: close`) before it closes: a request already on its way gets an answer, not a reset.
        var shutdownQuiet: UInt64

        init(
            headerTimeout: UInt64, idleTimeout: UInt64, upstreamTimeout: UInt64, linger: UInt64 = 2_000_000_000,
            lingerTotal: UInt64 = 30_000_000_000, maxBuffered: Int = 256 * 1024, shutdownQuiet: UInt64 = 1_000_000_000
        ) {
            self.headerTimeout = headerTimeout
            self.idleTimeout = idleTimeout
            self.upstreamTimeout = upstreamTimeout
            self.linger = linger
            self.lingerTotal = lingerTotal
            self.maxBuffered = maxBuffered
            self.shutdownQuiet = shutdownQuiet
        }

        init(seconds header: Int, idle: Int, upstream: Int) {
            self.init(
                headerTimeout: UInt64(header) * 1_000_000_000, idleTimeout: UInt64(idle) * 1_000_000_000,
                upstreamTimeout: UInt64(upstream) * 1_000_000_000)
        }
    }

    enum State: Equatable {
        /// Between requests. `headStarted`: when the first byte of the next head arrived (nil: none yet).
        case awaitingHead(headStarted: UInt64?)
        /// A CONNECT to a matched host was answered 200 at `since` and the proxy serves the tunnel itself: its first
        /// bytes (TLS, plain HTTP, anything else) say what it carries. The header timeout applies.
        case awaitingTunnelContent(since: UInt64)
        /// TLS with the client inside a served tunnel (interception), handshake not finished; `since` is when the
        /// CONNECT was answered. The header timeout applies.
        case tlsHandshake(since: UInt64)
        case exchange(Exchange)
        /// A blind CONNECT tunnel, or a WebSocket relayed after its `101`, owns the socket (its own timeouts apply);
        /// the exchange is kept for its answer should the tunnel fail to open, and for the access-log line.
        case tunnel(Exchange)
        /// The last response is written or being written and our side half-closes when it is flushed; input is
        /// discarded until the client closes, sends nothing for ``Limits/linger``, or ``Limits/lingerTotal`` has
        /// passed (so a client still sending, such as the rest of an upload answered early, gets no reset that
        /// would destroy the response before it reads it).
        case closing(since: UInt64)
        case closed
    }

    /// One request and its answer.
    struct Exchange: Equatable {
        /// Counts exchanges on the connection: a token arriving for an earlier one is recognised and dropped.
        let serial: Int
        let started: UInt64
        let isHead: Bool
        let clientMinorVersion: Int
        let expectsContinue: Bool
        /// Whether the connection stays open after this exchange (the client's wish, then ours).
        var keepAlive: Bool
        var request: RequestBody
        /// Whether a response head may still say keep-alive: the exchange allows it and the request body was read
        /// to its end (the rest of an unread body is discarded while the connection lingers, so an answer that
        /// comes first must say `Connection: close`).
        var responseMayKeepAlive: Bool { keepAlive && request.isComplete }
        var upstream: Upstream = .none
        var response: Response = .none
        var continueSent = false
        /// The client shut down its sending side after a complete request: answer, then close.
        var clientHalfClosed = false
        /// The status the client gets (for the access log); 0 until decided.
        var status = 0
        /// Upstream retries made (``RetryPolicy``), counted apart from the token retry (``Upstream/attempt``).
        var upstreamRetries: Int { upstream.retries }
    }

    /// Body bytes held at most while looking for a token error (token errors are small).
    static let lookAhead = 64 * 1024

    // The stored properties are set only by the event methods below, all in this file, so that no code outside the
    // machine's own type can change the lifecycle: the connection reports events and reads the state.
    private(set) var limits: Limits
    private(set) var state: State
    /// Exchanges begun on this connection.
    private(set) var exchanges = 0
    private(set) var timers: Timers
    /// Last time the client sent bytes or took response bytes (setting it reports the client's progress).
    private(set) var lastClientProgress: UInt64 {
        get { timers.lastClientProgress }
        set { timers.clientProgress(now: newValue) }
    }
    /// When shutdown began (nil: it has not).
    var shutdownSince: UInt64? { timers.shutdownSince }
    /// A pull of decrypted TLS input is scheduled for the next turn (``decryptedInputWaiting()``).
    private(set) var pullScheduled = false

    init(limits: Limits, now: UInt64) {
        self.limits = limits
        state = .awaitingHead(headStarted: nil)
        timers = Timers(now: now)
    }

    /// The exchange in progress, if any.
    var exchange: Exchange? {
        if case .exchange(let e) = state { return e }
        return nil
    }

    /// The exchange to report in the access log: the one in progress, or the CONNECT a tunnel serves.
    var current: Exchange? {
        switch state {
        case .exchange(let e), .tunnel(let e): return e
        default: return nil
        }
    }

    var isClosed: Bool { state == .closed }

    /// The configuration was reloaded: the time limits and buffer sizes of the generation the connection now
    /// follows apply from here on.
    mutating func limitsChanged(_ new: Limits) {
        limits = new
    }

    /// Applies `change` to the exchange in progress (a no-op in any other state) and returns its result.
    @inline(__always)
    private mutating func withExchange<R>(_ change: (inout Exchange) -> R) -> R? {
        guard case .exchange(var e) = state else { return nil }
        state = .closed  // drop the second reference so `e` is mutated in place
        defer { state = .exchange(e) }
        return change(&e)
    }
}

// MARK: - Events from the client side: bytes, request heads, local answers, EOF, resets, shutdown, CONNECT.
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
        /// The first bytes inside a served tunnel arrived: classify them (``TunnelContent``) and report what the
        /// tunnel becomes (``tunnelCarriesHTTP(now:)``, ``tlsHandshakeStarted()``, ``tunnelAfterFirstBytes(started:)``,
        /// ``tunnelContentRefused(started:)``), or nothing while more bytes are needed.
        case classifyTunnel
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
            return e.request.isComplete ? .wait : .pumpBody
        case .closing:
            return .discard
        case .awaitingTunnelContent:
            return buffered == 0 ? .wait : .classifyTunnel
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

    /// Decrypted TLS input waits in the session and the socket will not report it again (it was read while the
    /// connection could not take it): true when a pull is to be scheduled for the next turn of the loop, once, and
    /// not while the connection is closing.
    mutating func decryptedInputWaiting() -> Bool {
        guard !pullScheduled, takesRequests else { return false }
        pullScheduled = true
        return true
    }

    /// The scheduled pull's turn: true when input is still taken as requests.
    mutating func decryptedInputTurn() -> Bool {
        pullScheduled = false
        return takesRequests
    }

    /// After a callback from outside the input loop (the answer about the route) has carried out its events: take
    /// up buffered input now when they ended the exchange and the connection waits for its next request.
    var continuationAfterCallback: Continuation {
        if case .awaitingHead = state { return .now }
        return .none
    }

    enum ReadInterest: Equatable { case read, pause, leave }

    /// Whether a request body is being read: then a read event is read to its end, since a reset behind the
    /// body's bytes may not be reported again (the client's socket, the transfer and a replay file would stay
    /// until the idle timeout).
    var readsBody: Bool {
        guard case .exchange(let e) = state else { return false }
        return !e.request.isComplete
    }

    /// How one pass of the connection's read loop reads, decided as the pass begins.
    enum ReadPass: Equatable {
        /// The connection is closing: read to `EAGAIN` and drop the bytes.
        case discard
        /// A request body streams in: read to `EAGAIN`. libdispatch reports a hang-up (the client reset) once and
        /// then stops watching the socket, so a short read does not mean the error behind the data was seen.
        case toTheEnd
        /// Stop at the first short read, when everything the client sent so far is in (a head that arrived whole in
        /// one read is then parsed where it lies, without copying).
        case untilShortRead
    }

    var readPass: ReadPass {
        if case .closing = state { return .discard }
        return readsBody ? .toTheEnd : .untilShortRead
    }

    /// A pass of the read loop stopped before `EAGAIN` (`atLimit`: at the input limit, else at a short read) and its
    /// input was processed: whether to read on at once rather than wait for another read event, which after a
    /// hang-up may never come. It reads on from the input limit, and when a body now streams (a short read before
    /// the head just parsed turned out to have a body), as long as reading is wanted (``readInterest(buffered:limit:)``).
    func readsOn(atLimit: Bool, buffered: Int, limit: Int) -> Bool {
        (atLimit || readsBody) && readInterest(buffered: buffered, limit: limit) == .read
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
            if close || !e.request.isComplete { e.keepAlive = false }
            e.status = status
            e.upstream.finish()
            e.response.answered()
            return e.keepAlive
        }
    }

    /// Whether to send `100 Continue` now: once per exchange, for a client that asked, before any response.
    mutating func continueDue() -> Bool {
        withExchange { e in
            guard e.expectsContinue, !e.continueSent, e.response.awaitsHead else { return false }
            e.continueSent = true
            return true
        } ?? false
    }

    /// The form body is collected whole; the transfer can start.
    mutating func formCollected() {
        withExchange { e in e.request.finished() }
    }

    /// The request body is to be collected whole (a form that will carry the token). False when it is
    /// already complete.
    mutating func collectForm() -> Bool {
        withExchange { e in e.request.collectForm() } ?? false
    }

    /// Request-body bytes were moved into the buffer the upstream reads from (`pending` bytes now wait there).
    /// Returns true when the paused transfer must be resumed.
    mutating func requestBodyMoved(complete: Bool, pending: Int, now: UInt64) -> Bool {
        withExchange { e in
            if complete { e.request.finished() }
            guard pending > 0 || complete else { return false }
            return e.upstream.bodyArrived(now: now)
        } ?? false
    }

    /// The client's send queue shrank to `pending` bytes. True when the transfer paused for it must resume.
    mutating func clientDrained(pending: Int, now: UInt64) -> Bool {
        timers.clientProgress(now: now)
        guard pending < limits.maxBuffered / 2 else { return false }
        return withExchange { e in e.upstream.clientDrained(now: now) } ?? false
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
        if !e.keepAlive || !e.request.isComplete || shuttingDown || e.clientHalfClosed {
            state = .closing(since: now)
            return .close
        }
        state = .awaitingHead(headStarted: nil)
        timers.clientProgress(now: now)
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
        case .exchange(let e) where e.upstream.phase == .queued:
            // Waiting for a concurrency slot: the end of the client's input is taken as the client leaving, not as
            // a half-close that still wants the answer. A queue is where abandoned requests pile up, and a client
            // that gave up (a closed tab, a killed job) sends the same FIN.
            return .gone
        case .exchange(var e) where e.request.isComplete:
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
            state = .closed
            return .close(logStatus: e.response.hasBegun ? e.status : 499)
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
        guard timers.shutdownBegan(now: now) else { return }
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
        /// A request whose answer has not begun: answer 503 (logged like any answer), then close at once rather
        /// than linger after it as an answer otherwise does: the grace period is over.
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
            if e.response.hasBegun {
                state = .closed
                return .cut(logStatus: e.status)
            }
            e.keepAlive = false
            state = .exchange(e)
            return .answerUnavailable
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

    enum TunnelFailureStep: Equatable {
        /// Answer the CONNECT with the error, then close.
        case answer
        /// The client was told 200 already and speaks TLS: an HTTP answer would only be garbage to it. Log the
        /// CONNECT with the error's status, then close.
        case cut
    }

    /// The tunnel could not be opened; the exchange is back, for its answer or its access-log line. `answered`:
    /// the CONNECT was answered 200 before the upstream was connected (a matched host whose first bytes made it a
    /// blind tunnel).
    mutating func tunnelFailed(answered: Bool) -> TunnelFailureStep {
        guard case .tunnel(let e) = state else { return .cut }
        state = .exchange(e)
        return answered ? .cut : .answer
    }

    /// Whether a reload whose `allow_clients` no longer admits the client closes the connection now: nothing of a
    /// request is in progress (between requests, a TLS handshake or a served tunnel's first bytes awaited,
    /// closing), or a tunnel owns it, which carries no further request to refuse. An exchange in progress
    /// finishes, and the next request is refused (``ClientConnection/adoptGeneration(_:)``).
    var closesWhenNoLongerAdmitted: Bool {
        if case .exchange = state { return false }
        return true
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

    /// Inside a CONNECT to a matched host (answered 200, waiting for its first bytes in
    /// ``State/awaitingTunnelContent(since:)``), the client began TLS and no interception applies: a blind tunnel relays it, with an exchange for the
    /// CONNECT's access-log line (begun at `started`).
    mutating func tunnelAfterFirstBytes(started: UInt64) {
        guard case .awaitingTunnelContent = state else { return }
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
        guard case .awaitingTunnelContent = state else { return }
        exchanges += 1
        state = .exchange(
            Exchange(
                serial: exchanges, started: started, isHead: false, clientMinorVersion: 1,
                expectsContinue: false, keepAlive: false, request: .complete))
    }

    /// A CONNECT to a matched host was answered 200 and the proxy serves the tunnel: its exchange is answered (its
    /// access-log line waits for the first bytes) and those bytes are awaited.
    mutating func servedTunnelStarted(now: UInt64) {
        guard exchange != nil else { return }
        state = .awaitingTunnelContent(since: now)
        lastClientProgress = now
    }

    /// The first bytes inside a served tunnel are plain HTTP: requests may be parsed now.
    mutating func tunnelCarriesHTTP(now: UInt64) {
        guard case .awaitingTunnelContent = state else { return }
        state = .awaitingHead(headStarted: nil)
        lastClientProgress = now
    }

    /// The first bytes inside a served tunnel are TLS and the proxy intercepts it: the handshake begins, still
    /// within the header timeout counted from the CONNECT's answer.
    mutating func tlsHandshakeStarted() {
        guard case .awaitingTunnelContent(let since) = state else { return }
        state = .tlsHandshake(since: since)
    }

    /// The TLS handshake with the client finished: requests may come.
    mutating func handshakeFinished(now: UInt64) {
        guard case .tlsHandshake = state else { return }
        state = .awaitingHead(headStarted: nil)
        lastClientProgress = now
    }
}

// MARK: - Events from the upstream side: tokens, the transfer, the response head and body, token rejections.
extension ExchangeStateMachine {
    // MARK: token and transfer

    /// A token is needed before the transfer can start. Returns the serial the answer must carry.
    mutating func tokenRequested() -> Int? {
        withExchange { e in
            e.upstream.tokenRequested()
            return e.serial
        }
    }

    /// The route waits for the PAC file's answer. Returns the exchange's serial (nil: no exchange).
    mutating func routeRequested() -> Int? {
        withExchange { e in
            e.upstream.routeRequested()
            return e.serial
        }
    }

    /// The exchange waits in a concurrency cap's queue (``UpstreamLimiter``): returns its serial, to check with
    /// ``awaitsSlot(serial:)`` when the slot or the timeout comes.
    mutating func queueEntered() -> Int? {
        withExchange { e in
            e.upstream.queueEntered()
            return e.serial
        }
    }

    /// Whether exchange `serial` still waits for a slot (it may have been answered, or the connection closed).
    func awaitsSlot(serial: Int) -> Bool {
        guard case .exchange(let e) = state, e.serial == serial, e.upstream.phase == .queued else { return false }
        return true
    }

    /// The slot came: the exchange goes on to its token and transfer.
    mutating func slotGranted() {
        _ = withExchange { e in e.upstream.queueLeft() }
    }

    /// Whether the route answer for exchange `serial` is still wanted (the exchange may have been answered, or
    /// the connection closed, meanwhile).
    func awaitsRoute(serial: Int) -> Bool {
        guard case .exchange(let e) = state, e.serial == serial, e.upstream.phase == .awaitingRoute else {
            return false
        }
        return true
    }

    /// Whether a token answer tagged `serial` is still wanted (the exchange may have ended or closed).
    func awaitsToken(serial: Int) -> Bool {
        guard case .exchange(let e) = state, e.serial == serial, case .awaitingToken = e.upstream.phase else {
            return false
        }
        return true
    }

    /// The libcurl transfer started. `inspect`: its response is looked at for a token error.
    mutating func transferStarted(inspect: Bool, now: UInt64) {
        withExchange { e in
            e.upstream.transferStarted(inspect: inspect, now: now)
            e.response.forget()
            e.status = 0
        }
    }

    /// The attempt of the transfer in progress (1, or 2 for the retry).
    var attempt: Int { exchange?.upstream.attempt ?? 1 }

    // MARK: upstream retries

    /// Upstream retries made for the exchange in progress.
    var upstreamRetries: Int { exchange?.upstreamRetries ?? 0 }

    /// Whether the request may still go to the upstream again: a transfer is in progress, the request was read
    /// to its end, and nothing of an answer has reached the client (no `100 Continue`, no byte of the response:
    /// a head that is only decided or held has not been written).
    var mayResendUpstream: Bool {
        guard case .exchange(let e) = state, e.upstream.isTransferring, e.request.isComplete, !e.continueSent
        else { return false }
        return !e.response.hasBegun
    }

    /// Whether a failure or a status of cause `cause` would be retried if the policy and the budget allow it: the
    /// connection asks them (``RetryVerdict``) only then, since asking spends the budget. `asForm`: the status is a
    /// 414 that goes again as a form first, which is not a retry.
    func considersRetry(_ cause: RetryPolicy.Cause?, asForm: Bool = false) -> Bool {
        cause != nil && !asForm && mayResendUpstream
    }

    /// The attempt in progress is dropped (the connection stops the transfer and forgets its response) and the
    /// request waits to be sent again. Returns the serial the resend must carry; nil when the request may not be
    /// sent again (``mayResendUpstream``). `countsAsRetry`: false for a resend that is not a retry (a `GET`
    /// answered 414 going again as a `POST`).
    mutating func upstreamRetryScheduled(countsAsRetry: Bool = true) -> Int? {
        guard mayResendUpstream else { return nil }
        return withExchange { e in
            guard e.upstream.backOff(countsAsRetry: countsAsRetry) else { return nil }
            e.response.forget()
            e.status = 0
            return e.serial
        } ?? nil
    }

    /// Whether the backoff of exchange `serial` is still awaited (the client may have gone meanwhile).
    func awaitsRetry(serial: Int) -> Bool {
        guard case .exchange(let e) = state, e.serial == serial, e.upstream.isBackingOff else { return false }
        return true
    }

    /// The upstream sent or took bytes.
    mutating func upstreamProgress(now: UInt64) {
        withExchange { e in e.upstream.progress(now: now) }
    }

    /// The upstream wants request-body bytes. True when `100 Continue` is due first (the client waits for it
    /// before sending its body, and libcurl asking for the body means the upstream did not refuse it).
    mutating func upstreamWantsBody(now: UInt64) -> Bool {
        upstreamProgress(now: now)
        return continueDue()
    }

    enum BodySupplyStep: Equatable { case end, pause }

    /// The buffer the upstream reads from is empty: the body is complete, or the transfer waits for more.
    mutating func requestBodyBufferEmpty() -> BodySupplyStep {
        withExchange { e in
            if e.request.isComplete { return .end }
            e.upstream.waitingForBody()
            return .pause
        } ?? .end
    }

    // MARK: response head

    /// Whether upstream header lines still belong to the response head (after it come trailers, which are
    /// hop-by-hop and dropped).
    var readsResponseHead: Bool {
        guard case .exchange(let e) = state, e.upstream.isTransferring else { return false }
        return e.response.awaitsHead
    }

    /// The end of one upstream head. A 1xx head is followed by the real one; so is a 401/407 that libcurl
    /// answers itself when it holds the network credential (it is final only if a body or the end follows).
    static func headIsFinal(status: Int, answersChallenges: Bool) -> Bool {
        status >= 200 && !(answersChallenges && (status == 401 || status == 407))
    }

    /// The status the client's head carries for the upstream head being committed. Only a complete final head
    /// answers the client; without one (the transfer ended, or a body began, after a 1xx such as an unrequested
    /// `101`, or inside a head) the client gets a 502: relaying a 1xx as the answer, or a 200 whose head was cut,
    /// would leave it reading the next response on the connection wrongly.
    static func relayedStatus(upstream status: Int, headComplete: Bool) -> Int {
        status < 200 || !headComplete ? 502 : status
    }

    /// What a final response head leads to.
    enum FinalHeadStep: Equatable {
        /// Commit it (``responseHeadCommitted(status:framing:inspection:)``).
        case commit
        /// A `GET` refused 414 as too long goes again at once as a `POST` form (not an upstream retry): the
        /// attempt is dropped; the resend carries `serial`.
        case resendAsForm(serial: Int)
        /// The status is retried as the verdict allowed: the attempt is dropped, and the request goes again after
        /// `after` nanoseconds, carrying `serial`.
        case retry(serial: Int, after: UInt64)
    }

    /// A final response head arrived. `asForm`: it is a 414 to a `GET` that ``GetAsPost`` can send as a form, which
    /// comes before any retry; `verdict`: what the policy and the budget said about retrying its status (asked
    /// when ``considersRetry(_:asForm:)``). Neither happens once the request may not go again
    /// (``mayResendUpstream``).
    mutating func finalHead(asForm: Bool, verdict: RetryVerdict) -> FinalHeadStep {
        if asForm, let serial = upstreamRetryScheduled(countsAsRetry: false) { return .resendAsForm(serial: serial) }
        if case .retry(let wait) = verdict, let serial = upstreamRetryScheduled() {
            return .retry(serial: serial, after: wait)
        }
        return .commit
    }

    /// What to look for in a response that may be a token error.
    enum Inspection: Equatable {
        case none
        /// The status says it (498/499).
        case rejectedByStatus
        /// The body may say it (a small JSON, JSONP or HTML answer): hold it and look.
        case holdBody
    }

    /// Whether and how a response could be a token rejection.
    static func inspection(status: Int, framing: ResponseFraming, mayCarryError: Bool) -> Inspection {
        if TokenRejection.isRejection(status: status) { return .rejectedByStatus }
        if framing.noBody || !mayCarryError || (framing.contentLength ?? 0) > Int64(lookAhead) { return .none }
        return .holdBody
    }

    enum CommitStep: Equatable {
        /// The head waits to go out with the first body bytes (or the end).
        case ready
        /// Head and body are held to look for a token error.
        case hold
        /// The status is a token rejection: ask the token service what to do (then ``tokenRejection(_:)``).
        case rejected
    }

    /// The response head is decided (`framing` fixed). `inspection` is applied only when the transfer injected
    /// a token that could be refreshed.
    mutating func responseHeadCommitted(status: Int, framing: ResponseFraming, inspection: Inspection) -> CommitStep {
        withExchange { e in
            e.status = status
            // An answer before the request body was read to its end (an upload answered at once, a 413, a 401 to an
            // `Expect: 100-continue`) ends the connection, or the client would send its next request into the
            // discarded rest of that body.
            e.keepAlive = e.responseMayKeepAlive && framing.keepAlive
            let inspect = e.upstream.takeInspection()
            return e.response.commit(framing, inspection: inspect ? inspection : .none)
        } ?? .ready
    }

    /// The framing of the committed response head.
    var framing: ResponseFraming? { exchange?.response.framing }

    /// Whether the response head may say keep-alive (else `Connection: close` goes into it).
    var keepAlive: Bool { exchange?.responseMayKeepAlive ?? false }

    // MARK: token rejection

    /// What the token service decided about a rejected token.
    enum RejectionOutcome: Equatable {
        /// Pass the rejection to the client as is.
        case relay
        /// Stop this attempt; fetch a fresh token and retry with the replayed body.
        case retry
        /// Stop; answer with an explanation (a pregenerated token cannot be refreshed).
        case explain
    }

    enum RejectionStep: Equatable {
        /// Release the held response (``releaseHeld(transferLive:)``).
        case release
        /// Cancel the transfer now and come back on the next turn of the loop (``scheduledStep(serial:)``).
        case cancelAndReschedule(serial: Int)
    }

    mutating func tokenRejection(_ outcome: RejectionOutcome) -> RejectionStep {
        withExchange { e in
            switch outcome {
            case .relay:
                return .release
            case .retry, .explain:
                e.upstream.rejected(retry: outcome == .retry)
                e.response.forget()
                e.status = 0
                return .cancelAndReschedule(serial: e.serial)
            }
        } ?? .release
    }

    enum ScheduledStep: Equatable { case none, retry, explain }

    /// The turn after a rejection: what was scheduled for exchange `serial`, if it is still the current one.
    mutating func scheduledStep(serial: Int) -> ScheduledStep {
        guard case .exchange(let e) = state, e.serial == serial else { return .none }
        switch e.upstream.phase {
        case .retryScheduled: return .retry
        case .explainScheduled: return .explain
        default: return .none
        }
    }

    enum ReleaseStep: Equatable {
        /// Write the held head now (no body bytes were held).
        case flushHead
        /// Write the held head with the `bytes` held body bytes.
        case writeHeld(bytes: Int)
        /// Nothing to write yet (the head goes out at the end).
        case keep
    }

    /// Stop holding: the held head and body go to the client and the transfer streams on.
    mutating func releaseHeld(transferLive: Bool) -> ReleaseStep {
        withExchange { e in e.response.release(transferLive: transferLive) } ?? .keep
    }

    // MARK: response body and end

    enum BodyStep: Equatable {
        /// No head was committed yet: the connection commits it before reporting body bytes
        /// (``preparationForBody``); reported only when it did not.
        case commitHeadFirst
        /// Keep the bytes with the held response.
        case hold
        /// The held response is too large to be a token error: write the held head and its `bytes` held body
        /// bytes, then these.
        case writeHeld(bytes: Int)
        /// Write them (after the head if it has not gone out).
        case write
        /// A response without body (HEAD, 204, 304): drop them.
        case discard
        /// The client's queue is full: pause the transfer (libcurl hands the same bytes again on resume).
        case pause
        /// The client is gone: abort the transfer.
        case abort
    }

    /// What the connection does before reporting body bytes: commit a head that was not (a 401 that turns out
    /// final because a body follows it).
    var preparationForBody: EndPreparation {
        guard let e = exchange, e.upstream.isTransferring, e.response.awaitsHead else { return .none }
        return .commitHead
    }

    mutating func upstreamBody(count: Int, clientPending: Int, clientFailed: Bool, now: UInt64) -> BodyStep {
        let full = clientPending >= limits.maxBuffered
        return withExchange { e in
            guard e.upstream.isTransferring else { return .abort }
            e.upstream.progress(now: now)
            let step = e.response.body(count: count, clientFailed: clientFailed, full: full)
            if step == .pause { e.upstream.pausedForClient(now: now) }
            return step
        } ?? .abort
    }

    /// Whether body bytes may be taken from the upstream now, asked before they are given to a stateful filter
    /// (``BodyScrub``) that cannot hand them back: false pauses the transfer until the client's queue drains, as
    /// ``upstreamBody(count:clientPending:clientFailed:now:)`` would. Everything else that call decides (commit,
    /// hold, discard, abort) it still decides for the filtered bytes, which are then relayed with `clientPending` 0.
    mutating func upstreamBodyMayFlow(clientPending: Int, now: UInt64) -> Bool {
        let full = clientPending >= limits.maxBuffered
        return withExchange { e in
            guard e.upstream.isTransferring, !e.response.mayFlow(full: full) else { return true }
            e.upstream.pausedForClient(now: now)
            return false
        } ?? true
    }

    /// What the connection does before reporting a successful transfer's end (``transferEnded(_:verdict:)``):
    /// commit a head that never became final, or look at the held body for a token error.
    var preparationForEnd: EndPreparation {
        exchange?.response.preparationForEnd ?? .none
    }

    /// How a transfer ended.
    enum TransferEnd: Equatable {
        case success
        /// A failure caused by our side of the exchange (the client went away, a callback aborted).
        case clientSide
        /// The upstream failed (DNS, connect, TLS, timeout, reset). `retry`: the ``RetryPolicy`` cause when the
        /// failure is of a kind that is retried and the request was kept for a retry; nil when it is answered.
        case upstreamFailed(retry: RetryPolicy.Cause?)

        /// Classifies a finished transfer: `error` nil for success. `retryable`: upstream retries are on and the
        /// request was kept for one. A failure is never retried when the proxy itself ran out of descriptors,
        /// when the answer was invalid (it would be again), or when the request may have been processed
        /// (``UpstreamError/notResent``).
        init(_ error: UpstreamError?, retryable: Bool) {
            guard let error else {
                self = .success
                return
            }
            if error.isClientSide {
                self = .clientSide
                return
            }
            guard retryable, error.outOfDescriptors == nil, error.invalidResponse == nil, error.notResent == nil else {
                self = .upstreamFailed(retry: nil)
                return
            }
            self = .upstreamFailed(
                retry: RetryPolicy.cause(
                    failure: error.cause, viaParent: error.parent != nil, denied: error.deniedAddress != nil))
        }

        /// The cause a retry would have (for ``considersRetry(_:asForm:)``).
        var retryCause: RetryPolicy.Cause? {
            if case .upstreamFailed(let cause) = self { return cause }
            return nil
        }
    }

    /// When the connection takes up its buffered input again after an event from outside its input loop answered
    /// or ended the exchange (a pipelined request may be waiting behind it).
    enum Continuation: Equatable {
        /// Not needed: the connection closes after this exchange.
        case none
        /// As soon as the step is carried out.
        case now
        /// On the next turn of the loop: the event came from inside a transfer's callback, where no transfer may
        /// start.
        case nextTurn
    }

    /// What a failed exchange leads to.
    enum FailureStep: Equatable {
        /// There is no exchange (the connection closed meanwhile): close.
        case close
        /// The head is out: the only honest signal left is to cut the connection (truncation). Log, then close.
        case truncate
        /// Answer with the error; `close` when the request body was not read to its end.
        case answerError(close: Bool, then: Continuation)
    }

    enum FinishStep: Equatable {
        case close
        case failed(FailureStep)
        /// The upstream failed before anything reached the client and the verdict allowed a retry: the attempt is
        /// dropped and the request goes again after `after` nanoseconds, carrying `serial`.
        case retry(serial: Int, after: UInt64)
        /// Complete the response (the held head, and the last chunk when chunked), then
        /// ``endExchange(shuttingDown:now:)``, then take up buffered input as `then` says.
        case complete(ResponseFraming, then: Continuation)

        /// Whether the step follows a failure of the upstream (counted and logged as one).
        var isUpstreamFailure: Bool {
            switch self {
            case .retry, .failed(.truncate), .failed(.answerError): return true
            default: return false
            }
        }
    }

    /// The transfer ended (reported once, from outside its callbacks, after its ``preparationForEnd``). `verdict`:
    /// what the policy and the budget said about retrying a failure (asked when ``considersRetry(_:asForm:)``).
    mutating func transferEnded(_ end: TransferEnd, verdict: RetryVerdict = .refused) -> FinishStep {
        guard case .exchange(var e) = state else { return .close }
        switch end {
        case .clientSide:
            return .close
        case .upstreamFailed(let cause):
            if cause != nil, case .retry(let wait) = verdict, let serial = upstreamRetryScheduled() {
                return .retry(serial: serial, after: wait)
            }
            return .failed(exchangeFailed(from: .now))
        case .success:
            // Without its preparation there is no answer to complete: never relay one that was not committed.
            guard let f = e.response.complete() else { return .close }
            e.upstream.finish()
            state = .exchange(e)
            return .complete(f, then: Self.continuation(after: e, from: .now))
        }
    }

    /// The upstream's response head is refused (``ResponseHeadAssembler/violation``: a lenient client could read it
    /// differently from the proxy): the transfer is stopped and never retried, and the exchange fails. Reported from
    /// inside the transfer's callbacks, so a pipelined request waits a turn.
    mutating func responseHeadRefused() -> FailureStep {
        exchangeFailed(from: .nextTurn)
    }

    /// The upstream answered the exchange's WebSocket handshake with a `101` that cannot be relayed (another
    /// protocol, or an accept value that does not answer the key: ``WebSocketSwitch``): the exchange fails with the
    /// error, and the client connection ends after it, since the bytes the client sends behind its handshake are
    /// meant for the new protocol and must not be read as requests. Reported from inside the transfer's callbacks.
    mutating func switchRefused() -> FailureStep {
        guard case .exchange(var e) = state else { return .close }
        e.keepAlive = false
        state = .exchange(e)
        let step = exchangeFailed(from: .none)
        if case .answerError = step { return .answerError(close: true, then: .none) }
        return step
    }

    /// The request body cannot be read (an invalid chunk): the transfer is stopped and, as the rest of the body
    /// cannot be told from a next request, the connection ends after the answer.
    mutating func requestBodyInvalid() -> FailureStep {
        guard case .exchange(var e) = state else { return .close }
        e.keepAlive = false
        state = .exchange(e)
        return exchangeFailed(from: .none)
    }

    /// The request head the proxy made cannot be written upstream (``OutboundHead``: a byte its own parser would
    /// refuse, put there by a token, key or header credential): no transfer starts, the exchange fails. Decided
    /// where a transfer would start, which may be inside a token or retry callback: a pipelined request waits a
    /// turn.
    mutating func outboundHeadRefused() -> FailureStep {
        exchangeFailed(from: .nextTurn)
    }

    /// The exchange's token cannot be used (the token service failed, a token that may only go over https for an
    /// http request, a pregenerated token the upstream rejected): the exchange is answered with the error.
    mutating func tokenUnusable() -> FailureStep {
        exchangeFailed(from: .now)
    }

    /// The one rule for an exchange that fails: cut when its answer has begun, else answer with the error.
    private mutating func exchangeFailed(from: Continuation) -> FailureStep {
        guard case .exchange(var e) = state else { return .close }
        e.upstream.finish()
        let cut = e.response.fail()
        state = .exchange(e)
        if cut { return .truncate }
        let close = !e.request.isComplete
        return .answerError(close: close, then: close ? .none : Self.continuation(after: e, from: from))
    }

    /// Whether the connection stays open after exchange `e` for a request that may be buffered behind it.
    private static func continuation(after e: Exchange, from: Continuation) -> Continuation {
        e.keepAlive && e.request.isComplete && !e.clientHalfClosed ? from : .none
    }
}
