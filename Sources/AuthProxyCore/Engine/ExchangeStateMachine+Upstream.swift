/// Events from the upstream side: tokens, the transfer, the response head and body, token rejections.
extension ExchangeStateMachine {
    // MARK: token and transfer

    /// A token is needed before the transfer can start. Returns the serial the answer must carry.
    mutating func tokenRequested() -> Int? {
        withExchange { e in
            let attempt: Int
            switch e.upstream {
            case .retryScheduled: attempt = 2
            case .awaitingToken(let a): attempt = a
            default: attempt = 1
            }
            e.upstream = .awaitingToken(attempt: attempt)
            return e.serial
        }
    }

    /// The route waits for the PAC file's answer. Returns the exchange's serial (nil: no exchange).
    mutating func routeRequested() -> Int? {
        withExchange { e in
            e.upstream = .awaitingRoute
            return e.serial
        }
    }

    /// Whether the route answer for exchange `serial` is still wanted (the exchange may have been answered, or
    /// the connection closed, meanwhile).
    func awaitsRoute(serial: Int) -> Bool {
        guard case .exchange(let e) = state, e.serial == serial, case .awaitingRoute = e.upstream else { return false }
        return true
    }

    /// Whether a token answer tagged `serial` is still wanted (the exchange may have ended or closed).
    func awaitsToken(serial: Int) -> Bool {
        guard case .exchange(let e) = state, e.serial == serial, case .awaitingToken = e.upstream else { return false }
        return true
    }

    /// The libcurl transfer started. `inspect`: its response is looked at for a token error.
    mutating func transferStarted(inspect: Bool, now: UInt64) {
        withExchange { e in
            var attempt = 1
            switch e.upstream {
            case .awaitingToken(let a), .backingOff(let a): attempt = a
            default: break
            }
            e.upstream = .transferring(Transfer(attempt: attempt, inspect: inspect, lastProgress: now))
            e.response = .none
            e.status = 0
        }
    }

    /// The attempt of the transfer in progress (1, or 2 for the retry).
    var attempt: Int {
        guard let e = exchange else { return 1 }
        switch e.upstream {
        case .transferring(let t): return t.attempt
        case .awaitingToken(let a), .backingOff(let a): return a
        case .retryScheduled: return 2
        default: return 1
        }
    }

    // MARK: upstream retries

    /// Upstream retries made for the exchange in progress.
    var upstreamRetries: Int { exchange?.upstreamRetries ?? 0 }

    /// Whether the request may still go to the upstream again: a transfer is in progress, the request was read
    /// to its end, and nothing of an answer has reached the client (no `100 Continue`, no byte of the response:
    /// a head that is only decided or held has not been written).
    var mayResendUpstream: Bool {
        guard case .exchange(let e) = state, case .transferring = e.upstream, e.request == .complete, !e.continueSent
        else { return false }
        switch e.response {
        case .none, .headReady, .holding: return true
        case .streaming, .complete: return false
        }
    }

    /// The attempt in progress failed in a way ``RetryPolicy`` retries: it is dropped (the connection stops the
    /// transfer and forgets its response) and the request waits for its backoff. Returns the serial the end of
    /// the backoff must carry; nil when the request may not be sent again (``mayResendUpstream``).
    /// `countsAsRetry`: false for a resend that is not a retry (a `GET` answered 414 going again as a `POST`).
    mutating func upstreamRetryScheduled(countsAsRetry: Bool = true) -> Int? {
        guard mayResendUpstream else { return nil }
        return withExchange { e in
            guard case .transferring(let t) = e.upstream else { return nil }
            e.upstream = .backingOff(attempt: t.attempt)
            e.response = .none
            e.status = 0
            if countsAsRetry { e.upstreamRetries += 1 }
            return e.serial
        } ?? nil
    }

    /// Whether the backoff of exchange `serial` is still awaited (the client may have gone meanwhile).
    func awaitsRetry(serial: Int) -> Bool {
        guard case .exchange(let e) = state, e.serial == serial, case .backingOff = e.upstream else { return false }
        return true
    }

    /// The upstream sent or took bytes.
    mutating func upstreamProgress(now: UInt64) {
        withTransfer { t in t.lastProgress = now }
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
            if e.request == .complete { return .end }
            if case .transferring(var t) = e.upstream {
                t.waitingForBody = true
                e.upstream = .transferring(t)
            }
            return .pause
        } ?? .end
    }

    // MARK: response head

    /// Whether upstream header lines still belong to the response head (after it come trailers, which are
    /// hop-by-hop and dropped).
    var readsResponseHead: Bool {
        guard case .exchange(let e) = state, case .transferring = e.upstream else { return false }
        return e.response == .none
    }

    /// The end of one upstream head. A 1xx head is followed by the real one; so is a 401/407 that libcurl
    /// answers itself when it holds the network credential (it is final only if a body or the end follows).
    static func headIsFinal(status: Int, answersChallenges: Bool) -> Bool {
        status >= 200 && !(answersChallenges && (status == 401 || status == 407))
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
            var inspect = false
            if case .transferring(var t) = e.upstream {
                inspect = t.inspect
                t.inspect = false
                e.upstream = .transferring(t)
            }
            switch inspect ? inspection : .none {
            case .none:
                e.response = .headReady(framing)
                return .ready
            case .holdBody:
                e.response = .holding(framing, bytes: 0)
                return .hold
            case .rejectedByStatus:
                e.response = .holding(framing, bytes: 0)
                return .rejected
            }
        } ?? .ready
    }

    /// The framing of the committed response head.
    var framing: ResponseFraming? {
        switch exchange?.response {
        case .headReady(let f)?, .holding(let f, _)?, .streaming(let f)?: return f
        default: return nil
        }
    }

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
                e.upstream = outcome == .retry ? .retryScheduled : .explainScheduled
                e.response = .none
                e.status = 0
                return .cancelAndReschedule(serial: e.serial)
            }
        } ?? .release
    }

    enum ScheduledStep: Equatable { case none, retry, explain }

    /// The turn after a rejection: what was scheduled for exchange `serial`, if it is still the current one.
    mutating func scheduledStep(serial: Int) -> ScheduledStep {
        guard case .exchange(let e) = state, e.serial == serial else { return .none }
        switch e.upstream {
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
        withExchange { e in
            guard case .holding(let f, let n) = e.response else { return .keep }
            if n == 0 {
                e.response = .headReady(f)
                if !transferLive { return .keep }
                e.response = .streaming(f)
                return .flushHead
            }
            e.response = .streaming(f)
            return .writeHeld(bytes: n)
        } ?? .keep
    }

    // MARK: response body and end

    enum BodyStep: Equatable {
        /// No head was committed yet (a 401 that turns out final because a body follows): commit it, then
        /// report the bytes again.
        case commitHeadFirst
        /// Keep the bytes with the held response.
        case hold
        /// The held response is too large to be a token error: release it, then report the bytes again.
        case release
        /// Write them (after the head if it has not gone out).
        case write
        /// A response without body (HEAD, 204, 304): drop them.
        case discard
        /// The client's queue is full: pause the transfer (libcurl hands the same bytes again on resume).
        case pause
        /// The client is gone: abort the transfer.
        case abort
    }

    mutating func upstreamBody(count: Int, clientPending: Int, clientFailed: Bool, now: UInt64) -> BodyStep {
        let maxBuffered = limits.maxBuffered
        return withExchange { e in
            guard case .transferring(var t) = e.upstream else { return .abort }
            t.lastProgress = now
            defer { e.upstream = .transferring(t) }
            switch e.response {
            case .none:
                return .commitHeadFirst
            case .holding(let f, let n):
                if n + count <= Self.lookAhead {
                    e.response = .holding(f, bytes: n + count)
                    return .hold
                }
                return .release
            case .headReady(let f), .streaming(let f):
                if clientFailed { return .abort }
                if f.noBody { return .discard }
                if clientPending >= maxBuffered {
                    t.pausedForClient = true
                    return .pause
                }
                e.response = .streaming(f)
                return .write
            case .complete:
                return .abort
            }
        } ?? .abort
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
        /// The upstream failed in a way ``RetryPolicy`` retries, before anything reached the client: ask the policy
        /// and the host's budget (``upstreamRetryScheduled(countsAsRetry:)``); when they refuse, report
        /// `.upstreamFailed(retry: nil)`.
        case retry(RetryPolicy.Cause)
        /// No final head came (a lone 401 challenge, or nothing): commit the head from what was received, then
        /// report the end again.
        case commitHeadFirst
        /// Look at the held body for a token error (then ``tokenRejection(_:)`` or ``releaseHeld(transferLive:)``,
        /// and report the end again).
        case inspectHeld
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

    /// The transfer ended (reported from outside its callbacks).
    mutating func transferEnded(_ end: TransferEnd) -> FinishStep {
        guard case .exchange(var e) = state else { return .close }
        switch end {
        case .clientSide:
            return .close
        case .upstreamFailed(let cause):
            if let cause, mayResendUpstream { return .retry(cause) }
            return .failed(exchangeFailed(from: .now))
        case .success:
            switch e.response {
            case .none:
                return .commitHeadFirst
            case .holding:
                return .inspectHeld
            case .headReady(let f), .streaming(let f):
                e.upstream = .finished
                e.response = .complete
                state = .exchange(e)
                return .complete(f, then: Self.continuation(after: e, from: .now))
            case .complete:
                return .close
            }
        }
    }

    /// The upstream's response head is refused (``ResponseHeadAssembler/violation``: a lenient client could read it
    /// differently from the proxy): the transfer is stopped and never retried, and the exchange fails. Reported from
    /// inside the transfer's callbacks, so a pipelined request waits a turn.
    mutating func responseHeadRefused() -> FailureStep {
        exchangeFailed(from: .nextTurn)
    }

    /// The request body cannot be read (an invalid chunk): the transfer is stopped and, as the rest of the body
    /// cannot be told from a next request, the connection ends after the answer.
    mutating func requestBodyInvalid() -> FailureStep {
        guard case .exchange(var e) = state else { return .close }
        e.keepAlive = false
        state = .exchange(e)
        return exchangeFailed(from: .none)
    }

    /// The exchange's token cannot be used (the token service failed, a token that may only go over https for an
    /// http request, a pregenerated token the upstream rejected): the exchange is answered with the error.
    mutating func tokenUnusable() -> FailureStep {
        exchangeFailed(from: .now)
    }

    /// The one rule for an exchange that fails: cut when its answer has begun, else answer with the error.
    private mutating func exchangeFailed(from: Continuation) -> FailureStep {
        guard case .exchange(var e) = state else { return .close }
        e.upstream = .finished
        if case .streaming = e.response {
            state = .exchange(e)
            return .truncate
        }
        e.response = .none
        state = .exchange(e)
        let close = e.request != .complete
        return .answerError(close: close, then: close ? .none : Self.continuation(after: e, from: from))
    }

    /// Whether the connection stays open after exchange `e` for a request that may be buffered behind it.
    private static func continuation(after e: Exchange, from: Continuation) -> Continuation {
        e.keepAlive && e.request == .complete && !e.clientHalfClosed ? from : .none
    }
}
