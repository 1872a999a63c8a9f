/// Whether a replica can use Redis, decided from the outcomes of its operations: after a failure it works alone
/// and tries again after a backoff (1 s doubling to 30 s, ``TokenBackoff``). Says when something worth one log
/// line happened: a change of state, or of the cause. Pure: tests drive it with `now`.
struct ClusterHealth: Sendable, Equatable {
    enum State: Sendable, Equatable {
        /// Not tried yet.
        case unknown
        case up
        /// `cause`: the error's kind; `message`: what to log and show.
        case down(cause: RedisError.Kind, message: String, since: Int64)
    }

    private(set) var state: State = .unknown
    private(set) var backoff = TokenBackoff()

    var isUp: Bool { state == .up }

    /// Whether an operation may be tried at `now` (not while backing off after a failure).
    func mayTry(at now: Int64) -> Bool {
        if case .down = state { return !backoff.isBackingOff(at: now) }
        return true
    }

    /// An operation succeeded. True when that is news (Redis came back, or the first connection).
    mutating func succeeded() -> Bool {
        backoff.succeeded()
        guard state != .up else { return false }
        state = .up
        return true
    }

    /// An operation failed with `error`. True when that is news (it was up, or the cause changed); the retry
    /// waits for the backoff either way.
    mutating func failed(_ error: RedisError, at now: Int64) -> Bool {
        backoff.failed(at: now)
        if case .down(let cause, _, let since) = state, cause == error.kind {
            state = .down(cause: cause, message: error.message, since: since)
            return false
        }
        state = .down(cause: error.kind, message: error.message, since: now)
        return true
    }

    /// The time of the next attempt while down.
    var retryAt: Int64? {
        if case .down = state { return backoff.retryAt }
        return nil
    }
}
