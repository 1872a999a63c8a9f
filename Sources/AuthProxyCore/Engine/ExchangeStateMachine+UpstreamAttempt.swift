extension ExchangeStateMachine {
    /// What is asked of the upstream for the exchange: the route and the token awaited, the attempt in progress
    /// (its transfer's pauses and progress), the token retry and the upstream retries with their backoff. A
    /// sub-machine of the exchange whose phase changes only through the events below.
    struct Upstream: Equatable {
        enum Phase: Equatable {
            /// Nothing asked of an upstream (being routed, or answered by the proxy itself).
            case none
            /// The PAC file is being asked for the route (off the loop); the request is planned again with its answer.
            case awaitingRoute
            /// Waiting in a concurrency cap's queue (``UpstreamLimiter``); the request goes on when a slot is granted.
            case queued
            case awaitingToken(attempt: Int)
            case transferring(Transfer)
            /// The first attempt's token was rejected and its transfer stopped; a fresh token is asked for on the
            /// next turn of the loop (nothing may start from inside a libcurl callback).
            case retryScheduled
            /// A pregenerated token was rejected: the explanation is sent on the next turn of the loop.
            case explainScheduled
            /// An attempt failed before anything reached the client and is sent again when its backoff ends
            /// (``RetryPolicy``), or at once (a `GET` refused 414 going again as a form); `attempt` is the token
            /// attempt it carries on (a retry does not spend the token retry).
            case backingOff(attempt: Int)
            case finished
        }

        /// One transfer of the exchange.
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

        private(set) var phase: Phase
        /// Upstream retries made (``RetryPolicy``), counted apart from the token retry (``Transfer/attempt``).
        private(set) var retries = 0

        /// Nothing asked yet.
        static let none = Upstream(phase: .none)
        /// Nothing is, or will be, asked of an upstream by this exchange any more (answered, or a tunnel owns it).
        static let finished = Upstream(phase: .finished)

        private init(phase: Phase) {
            self.phase = phase
        }

        /// The transfer in progress, if any.
        var transfer: Transfer? {
            if case .transferring(let t) = phase { return t }
            return nil
        }

        var isTransferring: Bool { transfer != nil }

        /// The token attempt in progress or coming (1, or 2 for the retry after a rejection).
        var attempt: Int {
            switch phase {
            case .transferring(let t): return t.attempt
            case .awaitingToken(let a), .backingOff(let a): return a
            case .retryScheduled: return 2
            case .none, .awaitingRoute, .queued, .explainScheduled, .finished: return 1
            }
        }

        /// Applies `change` to the transfer in progress, if any.
        @inline(__always)
        private mutating func withTransfer<R>(_ change: (inout Transfer) -> R) -> R? {
            guard case .transferring(var t) = phase else { return nil }
            phase = .none  // drop the second reference so `t` is mutated in place
            defer { phase = .transferring(t) }
            return change(&t)
        }

        mutating func routeRequested() {
            phase = .awaitingRoute
        }

        mutating func queueEntered() {
            phase = .queued
        }

        /// The slot was granted: nothing is asked of the upstream yet (the token comes next).
        mutating func queueLeft() {
            if phase == .queued { phase = .none }
        }

        /// A token is asked for: the first attempt's, or the retry's after a rejection.
        mutating func tokenRequested() {
            let attempt: Int
            switch phase {
            case .retryScheduled: attempt = 2
            case .awaitingToken(let a): attempt = a
            default: attempt = 1
            }
            phase = .awaitingToken(attempt: attempt)
        }

        /// A transfer starts, carrying on the token attempt that was awaited or backing off.
        mutating func transferStarted(inspect: Bool, now: UInt64) {
            var attempt = 1
            switch phase {
            case .awaitingToken(let a), .backingOff(let a): attempt = a
            default: break
            }
            phase = .transferring(Transfer(attempt: attempt, inspect: inspect, lastProgress: now))
        }

        /// The response head is committed: whether it is to be inspected (asked once per transfer).
        mutating func takeInspection() -> Bool {
            withTransfer { t in
                defer { t.inspect = false }
                return t.inspect
            } ?? false
        }

        /// The upstream sent or took bytes.
        mutating func progress(now: UInt64) {
            withTransfer { t in t.lastProgress = now }
        }

        /// The transfer pauses until the client's queue drains.
        mutating func pausedForClient(now: UInt64) {
            withTransfer { t in
                t.pausedForClient = true
                t.lastProgress = now
            }
        }

        /// The client's queue drained below the resume mark: true when the paused transfer must resume.
        mutating func clientDrained(now: UInt64) -> Bool {
            withTransfer { t in
                guard t.pausedForClient else { return false }
                t.pausedForClient = false
                t.lastProgress = now
                return true
            } ?? false
        }

        /// The transfer found no request-body bytes to send and pauses for them.
        mutating func waitingForBody() {
            withTransfer { t in t.waitingForBody = true }
        }

        /// Request-body bytes arrived (or the body ended): true when the transfer waiting for them must resume.
        mutating func bodyArrived(now: UInt64) -> Bool {
            withTransfer { t in
                guard t.waitingForBody else { return false }
                t.waitingForBody = false
                t.lastProgress = now
                return true
            } ?? false
        }

        /// The attempt in progress is dropped to be sent again after its backoff. `countsAsRetry`: false for a
        /// resend that is not a retry (a `GET` answered 414 going again as a `POST`). False when no transfer is in
        /// progress.
        mutating func backOff(countsAsRetry: Bool) -> Bool {
            guard case .transferring(let t) = phase else { return false }
            phase = .backingOff(attempt: t.attempt)
            if countsAsRetry { retries += 1 }
            return true
        }

        var isBackingOff: Bool {
            if case .backingOff = phase { return true }
            return false
        }

        /// The token was rejected: its fresh token is asked for (`retry`), or the rejection explained, on the next
        /// turn.
        mutating func rejected(retry: Bool) {
            phase = retry ? .retryScheduled : .explainScheduled
        }

        mutating func finish() {
            phase = .finished
        }
    }
}
