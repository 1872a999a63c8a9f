import Testing

@testable import AuthProxyCore

/// The connection lifecycle, event by event, with a fake clock: each lifecycle case of
/// `Tests/e2e/test_regressions.py` (and the other e2e lifecycle tests) has its deterministic twin here.
@Suite struct ExchangeStateMachineTests {
    typealias M = ExchangeStateMachine
    static let s: UInt64 = 1_000_000_000
    /// header 10 s, idle 60 s, upstream 30 s, linger 2 s, 256 KiB buffered.
    static let limits = M.Limits(seconds: 10, idle: 60, upstream: 30)

    /// A fresh connection at t = 0 with one GET begun (and, unless `transfer` is false, its transfer started).
    static func forwarding(_ r: M.RequestFacts = .init(), inspect: Bool = false, transfer: Bool = true) -> M {
        var m = M(limits: limits, now: 0)
        #expect(m.nextInputStep(buffered: 100, now: 0) == .parseHead)
        m.requestBegan(r, shuttingDown: false, now: 0)
        if transfer { m.transferStarted(inspect: inspect, now: 0) }
        return m
    }

    static let plain = ResponseFraming(noBody: false, chunked: false, contentLength: 10, keepAlive: true)
    static let chunked = ResponseFraming(noBody: false, chunked: true, contentLength: nil, keepAlive: true)

    // MARK: keep-alive, pipelining, ending

    @Test func aKeptAliveExchangeEndsReadyForThePipelinedNextOne() {
        var m = Self.forwarding()
        #expect(m.responseHeadCommitted(status: 200, framing: Self.plain, inspection: .none) == .ready)
        #expect(m.upstreamBody(count: 10, clientPending: 0, clientFailed: false, now: 1) == .write)
        #expect(m.transferEnded(.success) == .complete(Self.plain, then: .now))
        #expect(m.endExchange(shuttingDown: false, now: 2) == .awaitNext)
        #expect(m.state == .awaitingHead(headStarted: nil))
        // The next request was already buffered behind the first.
        #expect(m.nextInputStep(buffered: 40, now: 2) == .parseHead)
        #expect(m.state == .awaitingHead(headStarted: 2))
        #expect(m.requestBegan(.init(), shuttingDown: false, now: 2) == 2)
    }

    @Test func connectionCloseFromTheClientClosesAfterTheAnswer() {
        var m = Self.forwarding(.init(keepAlive: false))
        _ = m.responseHeadCommitted(status: 200, framing: Self.plain, inspection: .none)
        #expect(m.keepAlive == false)
        _ = m.transferEnded(.success)
        #expect(m.endExchange(shuttingDown: false, now: 1) == .close)
        #expect(m.state == .closing(since: 1))
    }

    @Test func anHTTP10ClientWithoutALengthGetsACloseDelimitedBody() {
        let f = ResponseFraming.decide(
            status: 200, isHeadRequest: false, upstreamLength: nil, clientMinorVersion: 0, keepAlive: true)
        #expect(f == ResponseFraming(noBody: false, chunked: false, contentLength: nil, keepAlive: false))
        var m = Self.forwarding(.init(minorVersion: 0))
        _ = m.responseHeadCommitted(status: 200, framing: f, inspection: .none)
        _ = m.transferEnded(.success)
        #expect(m.endExchange(shuttingDown: false, now: 1) == .close)
    }

    @Test func aLocalAnswerToARequestWhoseBodyWasNotReadCloses() {
        var m = M(limits: Self.limits, now: 0)
        m.requestBegan(.init(hasBody: true), shuttingDown: false, now: 0)
        #expect(m.answerLocally(status: 404, close: false) == false)
        #expect(m.endExchange(shuttingDown: false, now: 0) == .close)
    }

    /// An upstream that answers an upload before reading it (nginx's `return 200`, a 413): the head says
    /// `Connection: close`, since the rest of the body is discarded while the connection lingers. Found by the
    /// soak: without it, the client sent its next request on the connection and got nothing.
    @Test func anAnswerBeforeTheRequestBodyEndedSaysCloseAndCloses() {
        var m = Self.forwarding(.init(hasBody: true))
        #expect(m.keepAlive == false)
        #expect(m.responseHeadCommitted(status: 200, framing: Self.plain, inspection: .none) == .ready)
        #expect(m.keepAlive == false)
        // The rest of the body arriving later does not revive the connection the head already closed.
        _ = m.requestBodyMoved(complete: true, pending: 0, now: 1)
        #expect(m.keepAlive == false)
        _ = m.transferEnded(.success)
        #expect(m.endExchange(shuttingDown: false, now: 1) == .close)
    }

    @Test func anAnswerAfterTheWholeRequestBodyKeepsTheConnection() {
        var m = Self.forwarding(.init(hasBody: true))
        _ = m.requestBodyMoved(complete: true, pending: 10, now: 0)
        _ = m.responseHeadCommitted(status: 200, framing: Self.plain, inspection: .none)
        #expect(m.keepAlive == true)
        _ = m.transferEnded(.success)
        #expect(m.endExchange(shuttingDown: false, now: 1) == .awaitNext)
    }

    @Test func aLocalAnswerWithoutBodyKeepsTheConnection() {
        var m = M(limits: Self.limits, now: 0)
        m.requestBegan(.init(), shuttingDown: false, now: 0)
        #expect(m.answerLocally(status: 200, close: false) == true)
        #expect(m.endExchange(shuttingDown: false, now: 0) == .awaitNext)
    }

    /// test_reset_after_local_answer_with_pipelined_request_does_not_crash: a reset while a request is queued
    /// behind a local answer must not revive the closed connection.
    @Test func aResetWhilePipelinedLeavesTheConnectionClosedForGood() {
        var m = M(limits: Self.limits, now: 0)
        m.requestBegan(.init(), shuttingDown: false, now: 0)
        _ = m.answerLocally(status: 200, close: false)
        // The write of the answer failed (RST): the connection is gone before the exchange ended.
        #expect(m.clientGone() == .close(logStatus: 200))
        #expect(m.endExchange(shuttingDown: false, now: 1) == .none)
        #expect(m.nextInputStep(buffered: 60, now: 1) == .wait)
        #expect(m.answerLocally(status: 200, close: false) == nil)
        #expect(m.tokenRequested() == nil)
        #expect(m.readInterest(buffered: 0, limit: 100) == .leave)
        #expect(m.isClosed)
    }

    @Test func aClientLeavingBeforeTheAnswerIsLoggedAs499() {
        var m = Self.forwarding()
        #expect(m.clientGone() == .close(logStatus: 499))
        var n = Self.forwarding()
        _ = n.responseHeadCommitted(status: 206, framing: Self.plain, inspection: .none)
        _ = n.upstreamBody(count: 5, clientPending: 0, clientFailed: false, now: 1)
        #expect(n.clientGone() == .close(logStatus: 206))
    }

    // MARK: half-close

    /// test_half_closed_client_still_gets_its_response.
    @Test func aHalfClosedClientStillGetsItsResponseThenTheConnectionCloses() {
        var m = Self.forwarding()
        #expect(m.clientEOF(pendingOutput: 0) == .halfClosed)
        #expect(m.readInterest(buffered: 0, limit: 100) == .leave)  // no more reading
        _ = m.responseHeadCommitted(status: 200, framing: Self.plain, inspection: .none)
        #expect(m.upstreamBody(count: 10, clientPending: 0, clientFailed: false, now: 1) == .write)
        #expect(m.transferEnded(.success) == .complete(Self.plain, then: .none))
        #expect(m.endExchange(shuttingDown: false, now: 1) == .close)
    }

    @Test func anEOFInTheMiddleOfARequestBodyAbandonsIt() {
        var m = Self.forwarding(.init(hasBody: true))
        #expect(m.clientEOF(pendingOutput: 0) == .gone)
        #expect(m.clientGone() == .close(logStatus: 499))
    }

    @Test func anEOFWhileTheLastResponseIsStillGoingOutWaits() {
        var m = Self.forwarding(.init(keepAlive: false))
        _ = m.responseHeadCommitted(status: 200, framing: Self.plain, inspection: .none)
        _ = m.transferEnded(.success)
        _ = m.endExchange(shuttingDown: false, now: 1)
        #expect(m.clientEOF(pendingOutput: 5000) == .pauseReading)
        #expect(m.clientEOF(pendingOutput: 0) == .gone)
    }

    // MARK: idle, slow readers, stalls

    /// Idle vs slow client: a connection waiting for its first request gets the header timeout, a kept-alive one
    /// the idle timeout, and a head that started must finish within the header timeout.
    @Test func idleAndHeaderTimeouts() {
        var m = M(limits: Self.limits, now: 0)
        #expect(m.tick(now: 10 * Self.s, clientPending: 0, lastSendProgress: 0) == .none)
        #expect(m.tick(now: 11 * Self.s, clientPending: 0, lastSendProgress: 0) == .close)
        m.requestBegan(.init(), shuttingDown: false, now: 1)
        _ = m.answerLocally(status: 200, close: false)
        _ = m.endExchange(shuttingDown: false, now: 1 * Self.s)
        // Kept alive: the idle timeout (60 s), not the header timeout.
        #expect(m.tick(now: 30 * Self.s, clientPending: 0, lastSendProgress: 0) == .none)
        #expect(m.tick(now: 62 * Self.s, clientPending: 0, lastSendProgress: 0) == .close)
        // A head that began at 20 s and is still incomplete at 31 s.
        _ = m.nextInputStep(buffered: 7, now: 20 * Self.s)
        #expect(m.tick(now: 29 * Self.s, clientPending: 0, lastSendProgress: 0) == .none)
        #expect(m.tick(now: 31 * Self.s, clientPending: 0, lastSendProgress: 0) == .headerTimedOut)
    }

    /// test_slow_steady_reader_is_not_cut_by_idle_timeout: a reader that keeps taking bytes is not idle, one that
    /// stopped is cut after the idle timeout.
    @Test func aSlowSteadyReaderIsNotCutButAStoppedOneIs() {
        var m = Self.forwarding()
        _ = m.responseHeadCommitted(status: 200, framing: Self.plain, inspection: .none)
        #expect(m.upstreamBody(count: 10, clientPending: 300_000, clientFailed: false, now: 0) == .pause)
        // Send progress every 50 s keeps it alive for 200 s.
        for t in stride(from: UInt64(50), through: 200, by: 50) {
            #expect(m.tick(now: t * Self.s, clientPending: 200_000, lastSendProgress: (t - 10) * Self.s) == .none)
        }
        #expect(m.tick(now: 261 * Self.s, clientPending: 200_000, lastSendProgress: 200 * Self.s) == .clientStalled)
    }

    @Test func backPressureFromASlowReaderPausesAndResumesTheUpstream() {
        var m = Self.forwarding()
        _ = m.responseHeadCommitted(status: 200, framing: Self.chunked, inspection: .none)
        #expect(m.upstreamBody(count: 16_384, clientPending: 256 * 1024, clientFailed: false, now: 1) == .pause)
        // A paused upstream is not stalled, however long the client takes (within the idle timeout).
        #expect(m.tick(now: 45 * Self.s, clientPending: 256 * 1024, lastSendProgress: 40 * Self.s) == .none)
        #expect(m.clientDrained(pending: 200 * 1024, now: 46 * Self.s) == false)  // above half: stay paused
        #expect(m.clientDrained(pending: 100 * 1024, now: 47 * Self.s) == true)
        #expect(m.clientDrained(pending: 0, now: 48 * Self.s) == false)  // resumed once
        #expect(m.upstreamBody(count: 16_384, clientPending: 0, clientFailed: false, now: 48 * Self.s) == .write)
    }

    @Test func anUpstreamThatStopsIsFailedAfterTheUpstreamTimeout() {
        var m = Self.forwarding()
        #expect(m.tick(now: 30 * Self.s, clientPending: 0, lastSendProgress: 0) == .none)
        m.upstreamProgress(now: 20 * Self.s)
        #expect(m.tick(now: 49 * Self.s, clientPending: 0, lastSendProgress: 0) == .none)
        #expect(m.tick(now: 51 * Self.s, clientPending: 0, lastSendProgress: 0) == .upstreamStalled)
        #expect(m.transferEnded(.upstreamFailed(retry: nil)) == .failed(.answerError(close: false, then: .now)))
    }

    @Test func aClientThatStopsSendingItsBodyIsCutAfterTheIdleTimeout() {
        var m = Self.forwarding(.init(hasBody: true))
        #expect(m.requestBodyBufferEmpty() == .pause)  // libcurl waits for bytes
        // Waiting for the client is not an upstream stall.
        #expect(m.tick(now: 40 * Self.s, clientPending: 0, lastSendProgress: 0) == .none)
        #expect(m.tick(now: 61 * Self.s, clientPending: 0, lastSendProgress: 0) == .clientStalled)
    }

    /// test_faults.py::test_client_reset_mid_upload_is_noticed_at_once: an upload held back by a slow upstream has
    /// its client reads paused, so a reset is looked for on each tick; when found, the exchange is abandoned and
    /// logged as 499.
    @Test func aPausedUploadIsProbedForAResetAndAbandonedAs499() {
        var m = Self.forwarding(.init(hasBody: true))
        m.upstreamProgress(now: 1 * Self.s)
        #expect(m.tick(now: 2 * Self.s, clientPending: 0, lastSendProgress: 0, clientReadsPaused: false) == .none)
        #expect(m.tick(now: 2 * Self.s, clientPending: 0, lastSendProgress: 0, clientReadsPaused: true) == .probeClient)
        // The timeouts still come first.
        #expect(
            m.tick(now: 40 * Self.s, clientPending: 0, lastSendProgress: 0, clientReadsPaused: true) == .upstreamStalled
        )
        // The probe found the client gone.
        #expect(m.clientGone() == .close(logStatus: 499))
        #expect(m.isClosed)
        #expect(m.tick(now: 3 * Self.s, clientPending: 0, lastSendProgress: 0, clientReadsPaused: true) == .none)
    }

    /// Only an unfinished request body is probed: paused reads after a complete request (a half-closed client,
    /// a pipelined backlog) are the normal case.
    @Test func aCompleteRequestIsNotProbed() {
        let m = Self.forwarding()
        #expect(m.tick(now: 2 * Self.s, clientPending: 0, lastSendProgress: 0, clientReadsPaused: true) == .none)
        let idle = M(limits: Self.limits, now: 0)
        #expect(idle.tick(now: 2 * Self.s, clientPending: 0, lastSendProgress: 0, clientReadsPaused: true) == .none)
    }

    @Test func requestBodyBytesResumeATransferWaitingForThem() {
        var m = Self.forwarding(.init(hasBody: true))
        #expect(m.requestBodyBufferEmpty() == .pause)
        #expect(m.requestBodyMoved(complete: false, pending: 0, now: 1) == false)
        #expect(m.requestBodyMoved(complete: false, pending: 4096, now: 1) == true)
        #expect(m.requestBodyMoved(complete: false, pending: 8192, now: 1) == false)  // not paused any more
        #expect(m.requestBodyBufferEmpty() == .pause)
        #expect(m.requestBodyMoved(complete: true, pending: 0, now: 2) == true)
        #expect(m.requestBodyBufferEmpty() == .end)
    }

    @Test func lingeringCloseWaitsForTheFlushThenTheLingerTime() {
        var m = Self.forwarding(.init(keepAlive: false))
        _ = m.responseHeadCommitted(status: 200, framing: Self.plain, inspection: .none)
        _ = m.transferEnded(.success)
        _ = m.endExchange(shuttingDown: false, now: 0)
        #expect(m.nextInputStep(buffered: 10, now: 1) == .discard)
        #expect(m.readInterest(buffered: 1_000_000, limit: 100) == .read)  // discarding, never paused
        #expect(m.tick(now: 30 * Self.s, clientPending: 10, lastSendProgress: 0) == .none)
        #expect(m.tick(now: 61 * Self.s, clientPending: 10, lastSendProgress: 0) == .close)
        #expect(m.tick(now: 1 * Self.s, clientPending: 0, lastSendProgress: 0) == .none)
        #expect(m.tick(now: 3 * Self.s, clientPending: 0, lastSendProgress: 0) == .close)
    }

    /// The rest of an upload the upstream answered early keeps coming after the answer went out: it is read and
    /// dropped while it flows (a close with unread input would reset the connection and could destroy the answer
    /// before the client reads it), and the connection closes once the client stops for the linger time, or after
    /// the total linger time however steadily it sends.
    @Test func aClientStillSendingAfterTheLastAnswerIsReadUntilItStopsOrTheTotalLingerPasses() {
        var m = Self.forwarding(.init(hasBody: true))
        _ = m.responseHeadCommitted(status: 413, framing: Self.plain, inspection: .none)
        _ = m.transferEnded(.success)
        #expect(m.endExchange(shuttingDown: false, now: 0) == .close)
        for t in 1...10 {
            m.clientProgress(now: UInt64(t) * Self.s)
            #expect(m.tick(now: UInt64(t) * Self.s + Self.s / 2, clientPending: 0, lastSendProgress: 0) == .none)
        }
        #expect(m.tick(now: 12 * Self.s + Self.s / 2, clientPending: 0, lastSendProgress: 0) == .close)

        var steady = Self.forwarding(.init(hasBody: true))
        _ = steady.responseHeadCommitted(status: 413, framing: Self.plain, inspection: .none)
        _ = steady.transferEnded(.success)
        _ = steady.endExchange(shuttingDown: false, now: 0)
        steady.clientProgress(now: 29 * Self.s)
        #expect(steady.tick(now: 29 * Self.s + Self.s / 2, clientPending: 0, lastSendProgress: Self.s) == .none)
        steady.clientProgress(now: 31 * Self.s)
        #expect(steady.tick(now: 31 * Self.s + Self.s / 2, clientPending: 0, lastSendProgress: Self.s) == .close)
    }

    @Test func onlyAConnectionWaitingQuietlyForARequestIsIdle() {
        var m = M(limits: Self.limits, now: 0)
        #expect(!m.isIdle(now: Self.s / 2, for: Self.s))
        #expect(m.isIdle(now: Self.s, for: Self.s))
        _ = m.nextInputStep(buffered: 3, now: Self.s)  // a head began
        #expect(!m.isIdle(now: 5 * Self.s, for: Self.s))
        var busy = Self.forwarding()
        #expect(!busy.isIdle(now: 50 * Self.s, for: Self.s))
        _ = busy.answerLocally(status: 200, close: false)
        _ = busy.endExchange(shuttingDown: false, now: 50 * Self.s)
        #expect(!busy.isIdle(now: 50 * Self.s + 1, for: Self.s))
        #expect(busy.isIdle(now: 51 * Self.s, for: Self.s))
    }

    @Test func inputAtTheLimitPausesReading() {
        let m = M(limits: Self.limits, now: 0)
        #expect(m.readInterest(buffered: 99, limit: 100) == .read)
        #expect(m.readInterest(buffered: 100, limit: 100) == .pause)
    }

    // MARK: 100-continue

    @Test func continueIsSentOnceWhenTheUpstreamAsksForTheBody() {
        var m = Self.forwarding(.init(expectsContinue: true, hasBody: true))
        #expect(m.upstreamWantsBody(now: 1) == true)
        #expect(m.upstreamWantsBody(now: 2) == false)
    }

    @Test func noContinueAfterTheResponseBegan() {
        // The upstream answered (e.g. 413) before asking for the body: the client must not get a 100 after it.
        var m = Self.forwarding(.init(expectsContinue: true, hasBody: true))
        _ = m.responseHeadCommitted(status: 413, framing: Self.plain, inspection: .none)
        #expect(m.upstreamWantsBody(now: 1) == false)
        var n = Self.forwarding(.init(hasBody: true))
        #expect(n.upstreamWantsBody(now: 1) == false)  // not asked for
    }

    @Test func aFormCollectedForItsTokenGetsItsContinueUpFront() {
        var m = Self.forwarding(.init(expectsContinue: true, hasBody: true), transfer: false)
        #expect(m.continueDue() == true)
        #expect(m.collectForm() == true)
        #expect(m.nextInputStep(buffered: 5, now: 1) == .pumpBody)
        #expect(m.tick(now: 61 * Self.s, clientPending: 0, lastSendProgress: 0) == .clientStalled)
        m.formCollected()
        m.transferStarted(inspect: true, now: 61 * Self.s)
        #expect(m.upstreamWantsBody(now: 62 * Self.s) == false)
    }

    // MARK: HEAD, 204, 304 framing

    @Test(arguments: [
        (200, true, Int64?(42), Int64?(42)),  // HEAD keeps the announced length
        (204, false, Int64?(0), Int64?.none),  // a 204 has no Content-Length at all
        (304, false, Int64?(42), Int64?(42)),
        (101, false, Int64?.none, Int64?.none),
    ])
    func bodilessResponses(status: Int, isHead: Bool, upstream: Int64?, sent: Int64?) {
        let f = ResponseFraming.decide(
            status: status, isHeadRequest: isHead, upstreamLength: upstream, clientMinorVersion: 1, keepAlive: true)
        #expect(f.noBody)
        #expect(!f.chunked)
        #expect(f.contentLength == sent)
        #expect(f.keepAlive)
    }

    @Test func bodyBytesOfABodilessResponseAreDroppedAndTheExchangeEnds() {
        var m = Self.forwarding(.init(isHead: true))
        let f = ResponseFraming.decide(
            status: 200, isHeadRequest: true, upstreamLength: 5, clientMinorVersion: 1, keepAlive: true)
        _ = m.responseHeadCommitted(status: 200, framing: f, inspection: .none)
        #expect(m.upstreamBody(count: 5, clientPending: 0, clientFailed: false, now: 1) == .discard)
        #expect(m.transferEnded(.success) == .complete(f, then: .now))
        #expect(m.endExchange(shuttingDown: false, now: 1) == .awaitNext)
    }

    @Test func noLengthMeansChunkedForHTTP11Clients() {
        #expect(
            ResponseFraming.decide(
                status: 200, isHeadRequest: false, upstreamLength: nil, clientMinorVersion: 1, keepAlive: true)
                == Self.chunked)
    }

    // MARK: token rejection: sniffing, holding, retry

    @Test func inspectionIsOnlyForSmallAnswersThatMayCarryAnError() {
        #expect(M.inspection(status: 498, framing: Self.plain, mayCarryError: false) == .rejectedByStatus)
        #expect(M.inspection(status: 200, framing: Self.plain, mayCarryError: true) == .holdBody)
        #expect(M.inspection(status: 200, framing: Self.plain, mayCarryError: false) == .none)
        var big = Self.plain
        big.contentLength = Int64(M.lookAhead) + 1
        #expect(M.inspection(status: 200, framing: big, mayCarryError: true) == .none)
        let head = ResponseFraming(noBody: true, chunked: false, contentLength: 3, keepAlive: true)
        #expect(M.inspection(status: 200, framing: head, mayCarryError: true) == .none)
    }

    @Test func anAPIKeyResponseIsNeverHeld() {
        var m = Self.forwarding(inspect: false)
        #expect(m.responseHeadCommitted(status: 498, framing: Self.plain, inspection: .rejectedByStatus) == .ready)
    }

    /// A 200 carrying `{"error":{"code":498}}`: held, found to be a rejection, retried once with a fresh token.
    @Test func aRejectionInTheBodyIsHeldAndRetriedWithAFreshToken() {
        var m = Self.forwarding(inspect: true, transfer: false)
        let serial = m.tokenRequested()!
        #expect(m.awaitsToken(serial: serial))
        m.transferStarted(inspect: true, now: 0)
        #expect(m.attempt == 1)
        #expect(m.responseHeadCommitted(status: 200, framing: Self.chunked, inspection: .holdBody) == .hold)
        #expect(m.upstreamBody(count: 60, clientPending: 0, clientFailed: false, now: 1) == .hold)
        #expect(m.preparationForEnd == .inspectHeld)
        #expect(m.tokenRejection(.retry) == .cancelAndReschedule(serial: serial))
        // Nothing reached the client; on the next turn the retry asks for a token again.
        #expect(m.exchange?.response == M.Response.none)
        #expect(m.scheduledStep(serial: serial) == .retry)
        #expect(m.scheduledStep(serial: serial + 1) == .none)
        #expect(m.tokenRequested() == serial)
        m.transferStarted(inspect: true, now: 2)
        #expect(m.attempt == 2)
        #expect(m.responseHeadCommitted(status: 200, framing: Self.plain, inspection: .holdBody) == .hold)
        _ = m.upstreamBody(count: 10, clientPending: 0, clientFailed: false, now: 3)
        #expect(m.preparationForEnd == .inspectHeld)
        #expect(m.releaseHeld(transferLive: false) == .writeHeld(bytes: 10))
        #expect(m.preparationForEnd == .none)
        #expect(m.transferEnded(.success) == .complete(Self.plain, then: .now))
        #expect(m.endExchange(shuttingDown: false, now: 3) == .awaitNext)
    }

    @Test func aRejectionByStatusThatIsRelayedGoesOutAtOnce() {
        var m = Self.forwarding(inspect: true)
        #expect(m.responseHeadCommitted(status: 498, framing: Self.plain, inspection: .rejectedByStatus) == .rejected)
        #expect(m.tokenRejection(.relay) == .release)
        #expect(m.releaseHeld(transferLive: true) == .flushHead)
        #expect(m.upstreamBody(count: 10, clientPending: 0, clientFailed: false, now: 1) == .write)
    }

    @Test func aHeldAnswerTooLargeToBeATokenErrorIsReleased() {
        var m = Self.forwarding(inspect: true)
        _ = m.responseHeadCommitted(status: 200, framing: Self.chunked, inspection: .holdBody)
        #expect(m.upstreamBody(count: 60_000, clientPending: 0, clientFailed: false, now: 1) == .hold)
        // Released with the bytes that overflow the hold, in the same step.
        #expect(
            m.upstreamBody(count: 16_384, clientPending: 0, clientFailed: false, now: 1) == .writeHeld(bytes: 60_000))
        #expect(m.releaseHeld(transferLive: true) == .keep)
        #expect(m.upstreamBody(count: 16_384, clientPending: 0, clientFailed: false, now: 1) == .write)
    }

    @Test func aPregeneratedTokenRejectionIsExplainedOnTheNextTurn() {
        var m = Self.forwarding(inspect: true)
        _ = m.responseHeadCommitted(status: 499, framing: Self.plain, inspection: .rejectedByStatus)
        guard case .cancelAndReschedule(let serial) = m.tokenRejection(.explain) else {
            Issue.record("expected a rescheduled explanation")
            return
        }
        #expect(m.scheduledStep(serial: serial) == .explain)
        #expect(m.answerLocally(status: 502, close: false) == true)
    }

    @Test func aTokenAnswerForAnEarlierExchangeIsIgnored() {
        var m = Self.forwarding(inspect: true, transfer: false)
        let first = m.tokenRequested()!
        _ = m.answerLocally(status: 429, close: false)
        _ = m.endExchange(shuttingDown: false, now: 1)
        #expect(!m.awaitsToken(serial: first))
        m.requestBegan(.init(), shuttingDown: false, now: 2)
        let second = m.tokenRequested()!
        #expect(!m.awaitsToken(serial: first))
        #expect(m.awaitsToken(serial: second))
    }

    /// The PAC file's answer comes back on the loop after the exchange was answered (or the connection closed):
    /// it is dropped; for the exchange still waiting it is taken, once.
    @Test func aRouteAnswerIsTakenOnlyByTheExchangeWaitingForIt() {
        var m = Self.forwarding(transfer: false)
        let first = m.routeRequested()!
        #expect(m.awaitsRoute(serial: first))
        #expect(!m.awaitsToken(serial: first))
        m.transferStarted(inspect: false, now: 1)
        #expect(!m.awaitsRoute(serial: first))
        _ = m.answerLocally(status: 502, close: false)
        _ = m.endExchange(shuttingDown: false, now: 2)
        m.requestBegan(.init(), shuttingDown: false, now: 3)
        let second = m.routeRequested()!
        #expect(!m.awaitsRoute(serial: first))
        #expect(m.awaitsRoute(serial: second))
        m.closed()
        #expect(!m.awaitsRoute(serial: second))
    }

    @Test func aClientGoneWhileARetryIsScheduledCancelsIt() {
        var m = Self.forwarding(inspect: true)
        _ = m.responseHeadCommitted(status: 498, framing: Self.plain, inspection: .rejectedByStatus)
        guard case .cancelAndReschedule(let serial) = m.tokenRejection(.retry) else {
            Issue.record("expected a rescheduled retry")
            return
        }
        _ = m.clientGone()
        #expect(m.scheduledStep(serial: serial) == .none)
    }

    // MARK: 401 holding for network authentication

    /// With a password or Kerberos credential libcurl answers a 401 challenge itself: that head is not the
    /// response; the next one is.
    @Test func aChallengeAnsweredByLibcurlIsNotTheResponse() {
        #expect(!M.headIsFinal(status: 401, answersChallenges: true))
        #expect(!M.headIsFinal(status: 407, answersChallenges: true))
        #expect(M.headIsFinal(status: 401, answersChallenges: false))
        #expect(!M.headIsFinal(status: 100, answersChallenges: false))
        var m = Self.forwarding()
        #expect(m.readsResponseHead)  // after the 401 head, the 200 head follows
        _ = m.responseHeadCommitted(status: 200, framing: Self.plain, inspection: .none)
        #expect(!m.readsResponseHead)  // trailers are not head lines
    }

    /// When the credential is refused, the 401 is final only because a body (or the end) follows it.
    @Test func aFinal401IsCommittedWhenItsBodyOrTheEndArrives() {
        var m = Self.forwarding()
        #expect(m.preparationForBody == .commitHead)
        #expect(m.upstreamBody(count: 30, clientPending: 0, clientFailed: false, now: 1) == .commitHeadFirst)
        _ = m.responseHeadCommitted(status: 401, framing: Self.plain, inspection: .none)
        #expect(m.upstreamBody(count: 30, clientPending: 0, clientFailed: false, now: 1) == .write)
        #expect(m.preparationForBody == .none)
        var n = Self.forwarding()
        #expect(n.preparationForEnd == .commitHead)
        let empty = ResponseFraming(noBody: false, chunked: false, contentLength: 0, keepAlive: true)
        _ = n.responseHeadCommitted(status: 401, framing: empty, inspection: .none)
        #expect(n.transferEnded(.success) == .complete(empty, then: .now))
    }

    // MARK: failures

    @Test func anUpstreamFailureBeforeTheHeadIsAnsweredAfterItTruncates() {
        var m = Self.forwarding()
        #expect(m.transferEnded(.upstreamFailed(retry: nil)) == .failed(.answerError(close: false, then: .now)))
        var n = Self.forwarding(.init(hasBody: true))
        #expect(n.transferEnded(.upstreamFailed(retry: nil)) == .failed(.answerError(close: true, then: .none)))
        var o = Self.forwarding()
        _ = o.responseHeadCommitted(status: 200, framing: Self.plain, inspection: .none)
        // The head is still held: answer instead.
        #expect(o.transferEnded(.upstreamFailed(retry: nil)) == .failed(.answerError(close: false, then: .now)))
        var p = Self.forwarding()
        _ = p.responseHeadCommitted(status: 200, framing: Self.plain, inspection: .none)
        _ = p.upstreamBody(count: 4, clientPending: 0, clientFailed: false, now: 1)
        #expect(p.transferEnded(.upstreamFailed(retry: nil)) == .failed(.truncate))
    }

    @Test func aFailedClientAbortsTheTransfer() {
        var m = Self.forwarding()
        _ = m.responseHeadCommitted(status: 200, framing: Self.plain, inspection: .none)
        #expect(m.upstreamBody(count: 4, clientPending: 0, clientFailed: true, now: 1) == .abort)
        #expect(m.transferEnded(.clientSide) == .close)
    }

    // MARK: shutdown, tunnels, TLS

    @Test func shutdownEndsBusyConnectionsAfterTheirExchange() {
        var busy = Self.forwarding()
        busy.shutdownRequested(now: 0)
        #expect(busy.keepAlive == false)
        _ = busy.responseHeadCommitted(status: 200, framing: Self.plain, inspection: .none)
        _ = busy.transferEnded(.success)
        #expect(busy.endExchange(shuttingDown: true, now: 1) == .close)
    }

    /// test_faults.py::test_request_just_after_sigterm_gets_connection_close: an idle kept-alive connection is not
    /// closed at once; a request arriving in the quiet time is answered with Connection: close, and a connection
    /// that stays idle closes gracefully (half-close and linger) once the quiet time is over.
    @Test func anIdleConnectionTakesOneLastRequestDuringTheQuietTime() {
        var m = M(limits: Self.limits, now: 0)
        m.shutdownRequested(now: 5 * Self.s)
        #expect(m.tick(now: 5 * Self.s + Self.s / 2, clientPending: 0, lastSendProgress: 0) == .none)
        #expect(m.nextInputStep(buffered: 40, now: 5 * Self.s + Self.s / 2) == .parseHead)
        m.requestBegan(.init(), shuttingDown: true, now: 5 * Self.s + Self.s / 2)
        #expect(m.keepAlive == false)
        #expect(m.answerLocally(status: 200, close: false) == false)
        #expect(m.endExchange(shuttingDown: true, now: 6 * Self.s) == .close)

        var idle = M(limits: Self.limits, now: 0)
        idle.shutdownRequested(now: 10 * Self.s)
        #expect(idle.tick(now: 11 * Self.s, clientPending: 0, lastSendProgress: 0) == .closeForShutdown)
        idle.closingForShutdown(now: 11 * Self.s)
        #expect(idle.nextInputStep(buffered: 40, now: 11 * Self.s) == .discard)
        #expect(idle.tick(now: 14 * Self.s, clientPending: 0, lastSendProgress: 0) == .close)

        // A second signal does not restart the quiet time.
        var twice = M(limits: Self.limits, now: 0)
        twice.shutdownRequested(now: 1 * Self.s)
        twice.shutdownRequested(now: 5 * Self.s)
        #expect(twice.tick(now: 2 * Self.s, clientPending: 0, lastSendProgress: 0) == .closeForShutdown)
        // A head being received is not cut by the quiet time (the grace period bounds it).
        var partial = M(limits: Self.limits, now: 0)
        #expect(partial.nextInputStep(buffered: 12, now: 0) == .parseHead)
        partial.shutdownRequested(now: 0)
        #expect(partial.tick(now: 2 * Self.s, clientPending: 0, lastSendProgress: 0) == .none)
    }

    /// test_faults.py::test_request_cut_by_the_grace_period_is_logged and ..._tunnel_...: at the end of the grace
    /// period every exchange still in flight ends with an access-log line.
    @Test func theEndOfTheGracePeriodEndsEveryExchangeVisibly() {
        var waiting = Self.forwarding()
        waiting.shutdownRequested(now: 0)
        #expect(waiting.graceExpired() == .answerUnavailable)
        #expect(waiting.answerLocally(status: 503, close: true) == false)
        #expect(waiting.endExchange(shuttingDown: true, now: 1) == .close)

        var streaming = Self.forwarding()
        _ = streaming.responseHeadCommitted(status: 200, framing: Self.plain, inspection: .none)
        #expect(streaming.upstreamBody(count: 4, clientPending: 0, clientFailed: false, now: 1) == .write)
        #expect(streaming.graceExpired() == .cut(logStatus: 200))
        #expect(streaming.isClosed)

        var tunnel = M(limits: Self.limits, now: 0)
        tunnel.requestBegan(.init(), shuttingDown: false, now: 0)
        tunnel.tunnelStarted()
        tunnel.shutdownRequested(now: 0)
        // A blind tunnel has the whole grace period (its own timeouts apply meanwhile).
        #expect(tunnel.tick(now: 5 * Self.s, clientPending: 0, lastSendProgress: 0) == .tunnel)
        #expect(tunnel.graceExpired() == .tunnel)

        var idle = M(limits: Self.limits, now: 0)
        #expect(idle.graceExpired() == .close)
        #expect(idle.isClosed)
    }

    @Test func aTunnelThatFailsToOpenAnswersItsConnect() {
        var m = M(limits: Self.limits, now: 0)
        m.requestBegan(.init(), shuttingDown: false, now: 0)
        m.tunnelStarted()
        #expect(m.tick(now: 500 * Self.s, clientPending: 0, lastSendProgress: 0) == .tunnel)
        #expect(m.clientEOF(pendingOutput: 0) == .tunnel)
        #expect(m.current?.status == 200)
        #expect(m.tunnelFailed(answered: false) == .answer)
        #expect(m.answerLocally(status: 502, close: true) == false)
        #expect(m.endExchange(shuttingDown: false, now: 1) == .close)
    }

    @Test func aTLSHandshakeThatNeverFinishesIsCutAtTheHeaderTimeout() {
        var m = M(limits: Self.limits, now: 0)
        m.requestBegan(.init(), shuttingDown: false, now: 0)
        _ = m.answerLocally(status: 200, close: false)
        m.servedTunnelStarted(now: 0)
        m.tlsHandshakeStarted()
        #expect(m.state == .tlsHandshake(since: 0))
        #expect(m.nextInputStep(buffered: 0, now: 1) == .wait)
        #expect(m.tick(now: 9 * Self.s, clientPending: 0, lastSendProgress: 0) == .none)
        #expect(m.tick(now: 11 * Self.s, clientPending: 0, lastSendProgress: 0) == .close)
        var n = M(limits: Self.limits, now: 0)
        n.requestBegan(.init(), shuttingDown: false, now: 0)
        n.servedTunnelStarted(now: 0)
        n.tlsHandshakeStarted()
        n.handshakeFinished(now: 5 * Self.s)
        // After the handshake the connection is a kept-alive one: the idle timeout applies.
        #expect(n.tick(now: 30 * Self.s, clientPending: 0, lastSendProgress: 0) == .none)
        #expect(n.nextInputStep(buffered: 20, now: 30 * Self.s) == .parseHead)
    }
}

/// Upstream retries (``RetryPolicy``) in the machine: allowed only while nothing reached the client, counted
/// apart from the token retry.
@Suite struct ExchangeStateMachineRetryTests {
    typealias M = ExchangeStateMachine
    static let plain = ExchangeStateMachineTests.plain

    @Test func aDecidedHeadThatWasNotWrittenMayBeRetried() {
        var m = ExchangeStateMachineTests.forwarding()
        #expect(m.mayResendUpstream)
        #expect(m.responseHeadCommitted(status: 503, framing: Self.plain, inspection: .none) == .ready)
        #expect(m.mayResendUpstream)
        guard let serial = m.upstreamRetryScheduled() else {
            Issue.record("no retry")
            return
        }
        #expect(m.awaitsRetry(serial: serial))
        #expect(!m.awaitsRetry(serial: serial + 1))
        #expect(m.exchange?.response == M.Response.none)
        #expect(m.exchange?.status == 0)
        #expect(m.upstreamRetries == 1)
        // Backing off is not an upstream stall.
        #expect(m.tick(now: 3_600_000_000_000, clientPending: 0, lastSendProgress: 3_600_000_000_000) == .none)
        m.transferStarted(inspect: false, now: 1)
        #expect(!m.awaitsRetry(serial: serial))
        #expect(m.attempt == 1)
        #expect(m.responseHeadCommitted(status: 200, framing: Self.plain, inspection: .none) == .ready)
        #expect(m.upstreamBody(count: 10, clientPending: 0, clientFailed: false, now: 2) == .write)
        #expect(m.transferEnded(.success) == .complete(Self.plain, then: .now))
        #expect(m.current?.upstreamRetries == 1)
    }

    @Test func nothingIsRetriedOnceAByteWentToTheClient() {
        var m = ExchangeStateMachineTests.forwarding()
        _ = m.responseHeadCommitted(status: 200, framing: Self.plain, inspection: .none)
        #expect(m.upstreamBody(count: 4, clientPending: 0, clientFailed: false, now: 1) == .write)
        #expect(!m.mayResendUpstream)
        #expect(m.upstreamRetryScheduled() == nil)
        #expect(m.transferEnded(.upstreamFailed(retry: nil)) == .failed(.truncate))
    }

    @Test func nothingIsRetriedAfterA100Continue() {
        var m = ExchangeStateMachineTests.forwarding(.init(expectsContinue: true, hasBody: true))
        let continueDue = m.upstreamWantsBody(now: 0)
        #expect(continueDue)
        _ = m.requestBodyMoved(complete: true, pending: 0, now: 0)
        #expect(!m.mayResendUpstream)
    }

    @Test func aRequestWhoseBodyIsStillComingIsNotRetried() {
        let m = ExchangeStateMachineTests.forwarding(.init(hasBody: true))
        #expect(!m.mayResendUpstream)
    }

    @Test func anUpstreamRetryKeepsTheTokenAttempt() {
        var m = ExchangeStateMachineTests.forwarding(inspect: true, transfer: false)
        let serial = m.tokenRequested()!
        m.transferStarted(inspect: true, now: 0)
        #expect(m.responseHeadCommitted(status: 498, framing: Self.plain, inspection: .rejectedByStatus) == .rejected)
        #expect(m.tokenRejection(.retry) == .cancelAndReschedule(serial: serial))
        #expect(m.tokenRequested() == serial)
        m.transferStarted(inspect: true, now: 1)
        #expect(m.attempt == 2)
        // The token retry's attempt is reset by the upstream: retried, still as the token's second attempt.
        #expect(m.upstreamRetryScheduled() == serial)
        #expect(m.attempt == 2)
        m.transferStarted(inspect: true, now: 2)
        #expect(m.attempt == 2)
        #expect(m.upstreamRetries == 1)
    }
}
