/// The lifecycle of one exchange over the proxy's own HTTP/1.1 client, as a value: ``HTTP1Transfer`` reports what
/// happened on its connection and carries out what this decides, so every decision is tested without a socket.
///
/// An exchange connects (or takes a kept-alive connection), writes the head, streams the body while the answer is
/// read (an upstream may answer before the upload ended), and ends once: complete, failed, cancelled or switched to
/// another protocol. Either side may pause until ``resume()``.
///
/// A kept-alive connection can turn out dead when it is used (the server closed it as it was taken). The request
/// then goes again, once, on a new connection, as libcurl does, when ``ResendPolicy`` allows it: nothing of the
/// answer arrived, and the request is idempotent or did not all reach the server.
struct HTTP1TransferStateMachine: Equatable {
    enum Phase: Equatable {
        /// Before ``start(pooledConnection:)``.
        case idle
        /// A new connection is being made.
        case connecting
        /// On a connection: the request is written and the answer read.
        case exchanging
        /// Complete, failed, cancelled or switched: nothing more happens.
        case ended
    }

    /// How far the request got on the current connection.
    enum RequestProgress: Equatable {
        /// The head is not written yet.
        case unsent
        /// The head is written; body bytes are asked for while not paused.
        case body(paused: Bool)
        /// Head and body were all handed to the connection.
        case sent
        /// The request could not be written to its end (the upstream stopped reading, or answered first).
        case cutShort
    }

    /// Where to get a connection at the start.
    enum Start: Equatable {
        /// A kept-alive connection was there: the head goes out at once.
        case sendHead
        case connect
    }

    /// What a lost connection (a failed write, or the end of its input) leads to.
    enum Loss: Equatable {
        /// The request goes again on a new connection, after the body is rewound when `rewindBody`. Call
        /// ``resending()`` once it is (or ``bodyNotRewound(afterWriteFailure:)`` if it cannot be).
        case resend(rewindBody: Bool)
        /// A kept-alive connection died before answering a request that may not go again: fail, saying so.
        case refuseResend
        /// The request cannot be written further, but the upstream may have answered first: read on.
        case readAnswer
        /// The input ended: the response reader decides whether the answer is complete.
        case endResponse
    }

    /// Which sides ``resume()`` restarts.
    struct Resumption: Equatable {
        var response = false
        var body = false
    }

    private(set) var phase = Phase.idle
    private(set) var request = RequestProgress.unsent
    private(set) var responsePaused = false
    /// The current connection came from the pool: it may be dead before the first byte.
    private var reusedConnection = false
    /// The one resend was spent.
    private var resent = false
    /// Body bytes were asked for on this attempt: a resend rewinds them first.
    private var bodyStarted = false
    private let hasBody: Bool

    init(hasBody: Bool) {
        self.hasBody = hasBody
    }

    var isEnded: Bool { phase == .ended }

    /// Body bytes may be asked for and written now.
    var bodyFlows: Bool { phase == .exchanging && request == .body(paused: false) }

    /// The answer may be read now.
    var readsResponse: Bool { phase == .exchanging && !responsePaused }

    // MARK: connecting and sending

    mutating func start(pooledConnection: Bool) -> Start {
        reusedConnection = pooledConnection
        phase = pooledConnection ? .exchanging : .connecting
        return pooledConnection ? .sendHead : .connect
    }

    /// A new connection is up: the head goes out on it.
    mutating func connected() {
        guard phase == .connecting else { return }
        phase = .exchanging
    }

    /// The head is about to be written.
    mutating func sendingHead() {
        request = hasBody ? .body(paused: false) : .sent
    }

    /// The head was written: true when the body starts to flow. Not after a write that failed at once and moved the
    /// exchange to a new connection (which sends its own head), nor after one that ended it.
    mutating func headWritten() -> Bool {
        guard bodyFlows else { return false }
        bodyStarted = true
        return true
    }

    /// The body source paused: no bytes are asked for until ``resume()``.
    mutating func bodyPaused() {
        guard request == .body(paused: false) else { return }
        request = .body(paused: true)
    }

    /// The body source ended.
    mutating func bodyEnded() {
        guard case .body = request else { return }
        request = .sent
    }

    /// The response side cannot take more: reading stops until ``resume()``.
    mutating func responseWasPaused() {
        responsePaused = true
    }

    mutating func resume() -> Resumption {
        guard phase != .ended else { return Resumption() }
        var r = Resumption()
        if responsePaused {
            responsePaused = false
            r.response = true
        }
        if request == .body(paused: true) {
            request = .body(paused: false)
            r.body = true
        }
        return r
    }

    // MARK: a lost connection

    /// A write failed. The request did not all reach the server, which therefore cannot have processed it: any
    /// method may go again.
    mutating func writeFailed(responseStarted: Bool) -> Loss {
        if let resend = resendAfterLoss(fullySent: false, responseStarted: responseStarted, resendable: { false }) {
            return resend
        }
        request = .cutShort
        return .readAnswer
    }

    /// The connection's input ended (EOF or reset). `writesPending`: bytes of the request were still waiting to be
    /// written. `resendable` (``UpstreamRequest/resendable``: idempotent, or harmless to repeat) is worked out only
    /// when it decides.
    mutating func inputEnded(responseStarted: Bool, writesPending: Bool, resendable: @autoclosure () -> Bool) -> Loss {
        let fullySent = request == .sent && !writesPending
        if let resend = resendAfterLoss(fullySent: fullySent, responseStarted: responseStarted, resendable: resendable)
        {
            return resend
        }
        // A dead kept-alive connection, and a request that may not go again.
        if reusedConnection, !resent, !responseStarted, fullySent { return .refuseResend }
        return .endResponse
    }

    /// The body could not be rewound for a ``Loss/resend(rewindBody:)``: what happens instead.
    mutating func bodyNotRewound(afterWriteFailure: Bool) -> Loss {
        guard afterWriteFailure else { return .endResponse }
        request = .cutShort
        return .readAnswer
    }

    /// The request goes again on a new connection.
    mutating func resending() {
        guard phase != .ended else { return }
        resent = true
        reusedConnection = false
        phase = .connecting
        request = .unsent
        bodyStarted = false
    }

    /// A 401 was read to its end and is answered (``DigestRound``): the request goes again, on the same connection
    /// when `reuseConnection` (the reader and the connection allow another request) and the request went out
    /// whole, else on a new one. Returns whether the same connection carries it. The one resend after a dead
    /// kept-alive connection stays unspent: the answer is not a resend of a lost request.
    mutating func answeringChallenge(reuseConnection: Bool) -> Bool {
        guard phase != .ended else { return false }
        let reuse = reuseConnection && request == .sent
        phase = reuse ? .exchanging : .connecting
        // Kept alive by its answer, yet a server may close it right after a 401 without saying so (a WebSocket
        // server rejecting a handshake does): the answer on it goes again on a new connection if it dies before any
        // byte of the response, as after a pooled connection.
        reusedConnection = reuse
        request = .unsent
        bodyStarted = false
        responsePaused = false
        return reuse
    }

    /// ``ResendPolicy`` for a kept-alive connection that died before any byte of the answer, once per exchange.
    private func resendAfterLoss(fullySent: Bool, responseStarted: Bool, resendable: () -> Bool) -> Loss? {
        guard reusedConnection, !resent, !responseStarted, !fullySent || resendable() else { return nil }
        return .resend(rewindBody: bodyStarted)
    }

    // MARK: the end

    /// The response is complete. `reusable`: the reader and the connection allow another request on it. Returns
    /// whether the connection goes back to the pool: not when the answer came before the request was all written
    /// (the rest of the body is not sent, and the connection is in the middle of it).
    mutating func responseComplete(reusable: Bool) -> Bool {
        if case .body = request { request = .cutShort }
        phase = .ended
        return reusable && request == .sent
    }

    /// Failed, cancelled or switched to another protocol; false if it had already ended.
    mutating func end() -> Bool {
        guard phase != .ended else { return false }
        phase = .ended
        return true
    }
}
