import Testing

@testable import AuthProxyCore

/// How an exchange fails and what the connection does next: an invalid request body, a refused response head, an
/// unusable token, and the classification of a finished transfer (answer, cut, retry, finish), each decided by the
/// machine with the connection only carrying it out.
@Suite struct ExchangeFailureTests {
    typealias M = ExchangeStateMachine
    static let limits = M.Limits(seconds: 10, idle: 60, upstream: 30)
    static let plain = ResponseFraming(noBody: false, chunked: false, contentLength: 10, keepAlive: true)

    /// How far the answer to the client has got when the failure is reported.
    enum Answer: CustomTestStringConvertible {
        /// No response head from the upstream yet.
        case none
        /// The head is decided and waits for the first body bytes.
        case headReady
        /// The head and body are held to look for a token error.
        case holding
        /// The head and some body bytes went out.
        case streaming

        var testDescription: String { "\(self)" }
    }

    /// A connection with one request begun and its transfer started, its answer at `answer`.
    static func exchange(_ r: M.RequestFacts = .init(), answer: Answer = .none) -> M {
        var m = M(limits: limits, now: 0)
        _ = m.nextInputStep(buffered: 100, now: 0)
        m.requestBegan(r, shuttingDown: false, now: 0)
        m.transferStarted(inspect: answer == .holding, now: 0)
        switch answer {
        case .none:
            break
        case .headReady:
            _ = m.responseHeadCommitted(status: 200, framing: plain, inspection: .none)
        case .holding:
            _ = m.responseHeadCommitted(status: 200, framing: plain, inspection: .holdBody)
        case .streaming:
            _ = m.responseHeadCommitted(status: 200, framing: plain, inspection: .none)
            _ = m.upstreamBody(count: 4, clientPending: 0, clientFailed: false, now: 1)
        }
        return m
    }

    // MARK: an invalid request body

    /// The rest of an unreadable body cannot be told from a next request: whatever the answer's progress, the
    /// connection ends, with a 400 when nothing went out and a cut when the answer had begun.
    @Test(arguments: [
        (Answer.none, M.FailureStep.answerError(close: true, then: .none)),
        (.headReady, .answerError(close: true, then: .none)),
        (.holding, .answerError(close: true, then: .none)),
        (.streaming, .truncate),
    ])
    func anInvalidRequestBodyEndsTheConnection(answer: Answer, expected: M.FailureStep) {
        var m = Self.exchange(.init(hasBody: true), answer: answer)
        #expect(m.requestBodyInvalid() == expected)
        #expect(!m.mayResendUpstream)
        if case .answerError = expected {
            #expect(m.answerLocally(status: 400, close: true) == false)
            #expect(m.endExchange(shuttingDown: false, now: 2) == .close)
        }
    }

    @Test func anInvalidBodyWithTheConnectionAlreadyClosedCloses() {
        var m = Self.exchange(.init(hasBody: true))
        m.closed()
        #expect(m.requestBodyInvalid() == .close)
    }

    // MARK: a refused response head

    /// A refused head is answered 502; the connection is kept when the request was read to its end and keep-alive
    /// holds, and then a pipelined request is taken up on the next turn (the refusal comes from inside a transfer
    /// callback).
    @Test(arguments: [
        (M.RequestFacts(), Answer.none, M.FailureStep.answerError(close: false, then: .nextTurn)),
        (M.RequestFacts(keepAlive: false), .none, .answerError(close: false, then: .none)),
        (M.RequestFacts(hasBody: true), .none, .answerError(close: true, then: .none)),
        (M.RequestFacts(), .headReady, .answerError(close: false, then: .nextTurn)),
        (M.RequestFacts(), .streaming, .truncate),
    ])
    func aRefusedHeadIsAnsweredOrCut(request: M.RequestFacts, answer: Answer, expected: M.FailureStep) {
        var m = Self.exchange(request, answer: answer)
        #expect(m.responseHeadRefused() == expected)
        // Never retried: the transfer is over for the exchange.
        #expect(!m.mayResendUpstream)
        #expect(m.upstreamRetryScheduled() == nil)
    }

    @Test func aHeadRefusedAfterTheClientHalfClosedIsNotFollowedByMoreInput() {
        var m = Self.exchange()
        #expect(m.clientEOF(pendingOutput: 0) == .halfClosed)
        #expect(m.responseHeadRefused() == .answerError(close: false, then: .none))
    }

    @Test func aHeadRefusedOnAClosedConnectionCloses() {
        var m = Self.exchange()
        m.closed()
        #expect(m.responseHeadRefused() == .close)
    }

    // MARK: a 101 that cannot be relayed

    /// A WebSocket handshake answered with a `101` the proxy will not relay (``WebSocketSwitch``): a 502, and the
    /// connection ends after it even when the request was complete and keep-alive — the client's bytes behind its
    /// handshake are frames of the protocol it expected, never a next request to read.
    @Test func aRefusedSwitchIsAnsweredAndTheConnectionEnds() {
        var m = Self.exchange()
        #expect(m.switchRefused() == .answerError(close: true, then: .none))
        #expect(!m.mayResendUpstream)
        #expect(m.answerLocally(status: 502, close: true) == false)
        #expect(m.endExchange(shuttingDown: false, now: 2) == .close)
        var closed = Self.exchange()
        closed.closed()
        #expect(closed.switchRefused() == .close)
    }

    // MARK: an unusable token

    @Test func anUnusableTokenIsAnsweredAndTheNextRequestTakenUpAtOnce() {
        var m = Self.exchange()
        _ = m.tokenRequested()
        #expect(m.tokenUnusable() == .answerError(close: false, then: .now))
        #expect(m.answerLocally(status: 502, close: false) == true)
        #expect(m.endExchange(shuttingDown: false, now: 1) == .awaitNext)
    }

    @Test func anUnusableTokenWhileTheBodyStreamsClosesAfterTheAnswer() {
        var m = Self.exchange(.init(hasBody: true))
        _ = m.tokenRequested()
        #expect(m.tokenUnusable() == .answerError(close: true, then: .none))
    }

    @Test func aRejectedPregeneratedTokenIsExplainedOnTheNextTurn() {
        var m = Self.exchange(answer: .holding)
        guard case .cancelAndReschedule(let serial) = m.tokenRejection(.explain) else {
            Issue.record("no reschedule")
            return
        }
        #expect(m.scheduledStep(serial: serial) == .explain)
        #expect(m.tokenUnusable() == .answerError(close: false, then: .now))
    }

    // MARK: classifying the end of a transfer

    static func error(
        _ cause: UpstreamFailure, denied: Bool = false, descriptors: Bool = false, invalid: Bool = false,
        notResent: Bool = false
    ) -> UpstreamError {
        var e = UpstreamError(cause: cause, detail: "", destination: "h:80", timeoutSeconds: 30)
        if denied { e.deniedAddress = IPAddress.parse("10.0.0.1") }
        if descriptors { e.outOfDescriptors = 24 }
        if invalid { e.invalidResponse = "two Content-Length" }
        if notResent { e.notResent = "POST" }
        return e
    }

    /// A refused or broken connection is retried when the request was kept for a retry; the client's own failures
    /// end the exchange; every other failure is answered.
    @Test(arguments: [
        (nil, true, M.TransferEnd.success),
        (error(.clientGone), true, .clientSide),
        (error(.requestBody), true, .clientSide),
        (error(.reset), true, .upstreamFailed(retry: .reset)),
        (error(.connect), true, .upstreamFailed(retry: .reset)),
        (error(.nothing), true, .upstreamFailed(retry: .reset)),
        (error(.partial), true, .upstreamFailed(retry: .reset)),
        (error(.reset), false, .upstreamFailed(retry: nil)),
        (error(.dns), true, .upstreamFailed(retry: nil)),
        (error(.timeout), true, .upstreamFailed(retry: nil)),
        (error(.untrustedCertificate), true, .upstreamFailed(retry: nil)),
        (error(.connect, denied: true), true, .upstreamFailed(retry: nil)),
        (error(.connect, descriptors: true), true, .upstreamFailed(retry: nil)),
        (error(.reset, invalid: true), true, .upstreamFailed(retry: nil)),
        (error(.nothing, notResent: true), true, .upstreamFailed(retry: nil)),
    ])
    func aFinishedTransferIsClassified(error: UpstreamError?, retryable: Bool, expected: M.TransferEnd) {
        #expect(M.TransferEnd(error, retryable: retryable) == expected)
    }

    /// What a classified end means for the exchange, by how far the answer got, when the policy and the budget
    /// allow a retry.
    @Test(arguments: [
        (
            M.RequestFacts(), Answer.none, M.TransferEnd.upstreamFailed(retry: .reset),
            M.FinishStep.retry(serial: 1, after: 5)
        ),
        (M.RequestFacts(), .headReady, .upstreamFailed(retry: .reset), .retry(serial: 1, after: 5)),
        (M.RequestFacts(), .holding, .upstreamFailed(retry: .reset), .retry(serial: 1, after: 5)),
        (M.RequestFacts(), .streaming, .upstreamFailed(retry: .reset), .failed(.truncate)),
        (
            M.RequestFacts(hasBody: true), .none, .upstreamFailed(retry: .reset),
            .failed(.answerError(close: true, then: .none))
        ),
        (M.RequestFacts(), .none, .upstreamFailed(retry: nil), .failed(.answerError(close: false, then: .now))),
        (
            M.RequestFacts(keepAlive: false), .none, .upstreamFailed(retry: nil),
            .failed(.answerError(close: false, then: .none))
        ),
        (M.RequestFacts(), .streaming, .upstreamFailed(retry: nil), .failed(.truncate)),
        (M.RequestFacts(), .none, .clientSide, .close),
        (M.RequestFacts(), .streaming, .clientSide, .close),
        // Reported without its preparation (``M/preparationForEnd``): nothing uncommitted is relayed.
        (M.RequestFacts(), .none, .success, .close),
        (M.RequestFacts(), .holding, .success, .close),
        (M.RequestFacts(), .headReady, .success, .complete(plain, then: .now)),
        (M.RequestFacts(), .streaming, .success, .complete(plain, then: .now)),
        (M.RequestFacts(keepAlive: false), .streaming, .success, .complete(plain, then: .none)),
    ])
    func aTransferEndIsCarriedOut(request: M.RequestFacts, answer: Answer, end: M.TransferEnd, expected: M.FinishStep) {
        var m = Self.exchange(request, answer: answer)
        #expect(m.transferEnded(end, verdict: .retry(after: 5)) == expected)
    }

    /// A retry the policy or the budget refuses is answered in the same step, and counted once as an upstream
    /// failure.
    @Test(arguments: [RetryVerdict.refused, .budgetExhausted])
    func aRefusedRetryIsAnswered(verdict: RetryVerdict) {
        var m = Self.exchange()
        #expect(m.considersRetry(M.TransferEnd.upstreamFailed(retry: .reset).retryCause))
        let step = m.transferEnded(.upstreamFailed(retry: .reset), verdict: verdict)
        #expect(step == .failed(.answerError(close: false, then: .now)))
        #expect(step.isUpstreamFailure)
        #expect(!m.mayResendUpstream)
        #expect(m.upstreamRetries == 0)
    }

    /// A failure of a kind that is not retried is answered whatever the verdict.
    @Test func aFailureWithoutACauseIsNotRetried() {
        var m = Self.exchange()
        #expect(!m.considersRetry(M.TransferEnd.upstreamFailed(retry: nil).retryCause))
        #expect(
            m.transferEnded(.upstreamFailed(retry: nil), verdict: .retry(after: 1))
                == .failed(.answerError(close: false, then: .now)))
    }

    @Test func anAcceptedRetryBacksOff() {
        var m = Self.exchange()
        guard
            case .retry(let serial, let wait) = m.transferEnded(
                .upstreamFailed(retry: .reset), verdict: .retry(after: 9))
        else {
            Issue.record("no retry")
            return
        }
        #expect(wait == 9)
        #expect(m.awaitsRetry(serial: serial))
        #expect(m.upstreamRetries == 1)
        #expect(m.exchange?.response == M.Response.none)
    }

    @Test func aTransferEndingAfterACloseCloses() {
        var m = Self.exchange()
        m.closed()
        #expect(m.transferEnded(.upstreamFailed(retry: .reset)) == .close)
        #expect(m.transferEnded(.success) == .close)
    }

    @Test(arguments: [
        (M.FinishStep.retry(serial: 1, after: 0), true),
        (.failed(.truncate), true),
        (.failed(.answerError(close: false, then: .now)), true),
        (.failed(.close), false),
        (.close, false),
        (.complete(plain, then: .now), false),
    ])
    func upstreamFailuresAreTheStepsThatFollowOne(step: M.FinishStep, expected: Bool) {
        #expect(step.isUpstreamFailure == expected)
    }

    /// A half-closed client gets its answer and nothing more is read as a request.
    @Test func aCompleteResponseToAHalfClosedClientIsNotFollowedByMoreInput() {
        var m = Self.exchange(answer: .streaming)
        #expect(m.clientEOF(pendingOutput: 0) == .halfClosed)
        #expect(m.transferEnded(.success) == .complete(Self.plain, then: .none))
    }

    @Test func inputStopsBeingRequestsOnceTheConnectionCloses() {
        var m = Self.exchange()
        #expect(m.takesRequests)
        _ = m.transferEnded(.upstreamFailed(retry: nil))
        _ = m.answerLocally(status: 502, close: true)
        #expect(m.endExchange(shuttingDown: false, now: 1) == .close)
        #expect(!m.takesRequests)
        m.closed()
        #expect(!m.takesRequests)
    }

    /// A request planned again when its route arrives may be answered at once: then a pipelined request behind it
    /// is taken up; when the transfer started instead, or the connection closes, nothing is.
    @Test func aCallbackThatEndedTheExchangeTakesUpBufferedInput() {
        var answered = Self.exchange(answer: .none)
        _ = answered.routeRequested()
        #expect(answered.continuationAfterCallback == .none)
        _ = answered.answerLocally(status: 429, close: false)
        #expect(answered.endExchange(shuttingDown: false, now: 1) == .awaitNext)
        #expect(answered.continuationAfterCallback == .now)
        var closing = Self.exchange(answer: .none)
        _ = closing.answerLocally(status: 403, close: true)
        #expect(closing.endExchange(shuttingDown: false, now: 1) == .close)
        #expect(closing.continuationAfterCallback == .none)
    }

    /// Only a complete final head answers the client; anything else becomes a 502.
    @Test(arguments: [
        (200, true, 200), (404, true, 404), (101, true, 502), (100, true, 502), (200, false, 502), (0, false, 502),
    ])
    func theRelayedStatus(upstream: Int, complete: Bool, expected: Int) {
        #expect(M.relayedStatus(upstream: upstream, headComplete: complete) == expected)
    }
}
