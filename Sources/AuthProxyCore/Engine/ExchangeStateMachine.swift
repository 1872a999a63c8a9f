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
        /// TLS with the client after an intercepted CONNECT, handshake not finished; or a CONNECT to a matched host
        /// answered 200 whose first bytes (TLS, plain HTTP, anything else) are awaited. The header timeout applies.
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
        var responseMayKeepAlive: Bool { keepAlive && request == .complete }
        var upstream: Upstream = .none
        var response: Response = .none
        var continueSent = false
        /// The client shut down its sending side after a complete request: answer, then close.
        var clientHalfClosed = false
        /// The status the client gets (for the access log); 0 until decided.
        var status = 0
        /// Upstream retries made (``RetryPolicy``), counted apart from the token retry (``Transfer/attempt``).
        var upstreamRetries = 0
    }

    /// Where reading the request body stands.
    enum RequestBody: Equatable {
        case complete
        /// Being read and handed to the upstream as it comes.
        case streaming
        /// An urlencoded form collected whole before the transfer starts (the token goes into it).
        case collectingForm
    }

    enum Upstream: Equatable {
        /// Nothing asked of an upstream (being routed, or answered by the proxy itself).
        case none
        /// The PAC file is being asked for the route (off the loop); the request is planned again with its answer.
        case awaitingRoute
        case awaitingToken(attempt: Int)
        case transferring(Transfer)
        /// The first attempt's token was rejected and its transfer stopped; a fresh token is asked for on the
        /// next turn of the loop (nothing may start from inside a libcurl callback).
        case retryScheduled
        /// A pregenerated token was rejected: the explanation is sent on the next turn of the loop.
        case explainScheduled
        /// An attempt failed before anything reached the client and is retried when its backoff ends
        /// (``RetryPolicy``); `attempt` is the token attempt it carries on (a retry does not spend the token retry).
        case backingOff(attempt: Int)
        case finished
    }

    /// One libcurl transfer of the exchange.
    struct Transfer: Equatable {
        /// 1, or 2 for the one retry after a token rejection.
        var attempt: Int
        /// Whether the response is inspected for a token error (a refreshable token was injected).
        var inspect: Bool
        /// The upstream is paused because the client's send queue is full.
        var pausedForClient = false
        /// The upstream is paused waiting for request-body bytes.
        var waitingForBody = false
        /// Last time the upstream sent or took bytes.
        var lastProgress: UInt64
    }

    /// The answer to the client.
    enum Response: Equatable {
        case none
        /// The head is decided and waits (with the connection) to go out with the first body bytes or at the end,
        /// so a small response costs one `send`.
        case headReady(ResponseFraming)
        /// The head and up to ``ExchangeStateMachine/lookAhead`` body bytes are held to look for a token error.
        case holding(ResponseFraming, bytes: Int)
        /// The head is written; body bytes follow.
        case streaming(ResponseFraming)
        case complete
    }

    /// Body bytes held at most while looking for a token error (token errors are small).
    static let lookAhead = 64 * 1024

    var limits: Limits
    // Changed only by the event methods (in the `+Client`, `+Upstream` and `+Timers` extensions).
    var state: State
    /// Exchanges begun on this connection.
    var exchanges = 0
    /// Last time the client sent bytes or took response bytes.
    var lastClientProgress: UInt64
    /// When shutdown began (nil: it has not).
    var shutdownSince: UInt64? = nil

    init(limits: Limits, now: UInt64) {
        self.limits = limits
        state = .awaitingHead(headStarted: nil)
        lastClientProgress = now
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

    /// Applies `change` to the exchange in progress (a no-op in any other state) and returns its result.
    @inline(__always)
    mutating func withExchange<R>(_ change: (inout Exchange) -> R) -> R? {
        guard case .exchange(var e) = state else { return nil }
        state = .closed  // drop the second reference so `e` is mutated in place
        defer { state = .exchange(e) }
        return change(&e)
    }

    /// Applies `change` to the transfer in progress, if any.
    @inline(__always)
    mutating func withTransfer<R>(_ change: (inout Transfer) -> R) -> R? {
        withExchange { e -> R? in
            guard case .transferring(var t) = e.upstream else { return nil }
            defer { e.upstream = .transferring(t) }
            return change(&t)
        } ?? nil
    }
}
