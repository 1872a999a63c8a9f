/// What a `prefetch = true` credential does next for one server root: the decision of
/// `TokenService.startPrefetching`, as a pure function of the key's ``TokenStatus`` and the clock.
enum PrefetchPlan {
    enum Action: Equatable {
        /// No usable token: request one.
        case fetch
        /// The token is inside its refresh margin: refresh it while it is still handed out.
        case refresh
        /// Nothing to do now.
        case none
    }

    /// How long to wait before looking again while a token request runs.
    static let pollMillis: Int64 = 1000
    /// The shortest wait before looking again: a deadline a few milliseconds away (or one the clock passed
    /// between the look and the timer) must not make the service spin.
    static let minimumWaitMillis: Int64 = 10

    /// The action now, and when to look again (nil: never; the token does not expire).
    static func next(status: TokenStatus?, refreshMargin: Int64, now: Int64) -> (action: Action, checkIn: Int64?) {
        let plan = unfloored(status: status, refreshMargin: refreshMargin, now: now)
        return (plan.action, plan.checkIn.map { max(minimumWaitMillis, $0) })
    }

    /// The plan for `key` as `cache` has it at `now`: its status and the refresh margin of the token it holds.
    static func next<Waiter>(key: String, in cache: TokenCache<Waiter>, now: Int64) -> (action: Action, checkIn: Int64?)
    {
        next(
            status: cache.status(key: key, now: now), refreshMargin: cache.entries[key]?.token?.refreshMargin ?? 0,
            now: now)
    }

    private static func unfloored(status: TokenStatus?, refreshMargin: Int64, now: Int64) -> (
        action: Action, checkIn: Int64?
    ) {
        guard let s = status else { return (.fetch, pollMillis) }
        switch s.state {
        case .refreshing:
            return (.none, pollMillis)
        case .failing, .rejected:
            // The cache answers with its error until retryAt: try then.
            let at = s.retryAt ?? now
            return at > now ? (.none, at - now) : (.fetch, pollMillis)
        case .expired:
            return (.fetch, pollMillis)
        case .valid:
            guard let expires = s.expires else { return (.none, nil) }
            let due = expires - refreshMargin
            return due > now ? (.none, due - now) : (.refresh, pollMillis)
        }
    }
}
