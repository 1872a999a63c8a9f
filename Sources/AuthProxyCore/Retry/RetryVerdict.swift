/// Whether a failed attempt (a transfer that failed, a final head whose status is retried) goes to the upstream
/// again: the ``RetryPolicy`` first (attempts left, backoff, `Retry-After`), then the host's ``RetryBudget``, spent
/// only when the policy allows the retry. The connection decides it before it reports the event that may retry
/// (``ExchangeStateMachine/transferEnded(_:verdict:)``, ``ExchangeStateMachine/finalHead(asForm:verdict:)``), so
/// the machine takes the whole decision in that one event.
enum RetryVerdict: Equatable {
    /// Send the request again after this many nanoseconds.
    case retry(after: UInt64)
    /// The policy gives up (no attempts left, a wait longer than the cap): the answer or the error is relayed.
    case refused
    /// The policy would retry but the host's budget is spent: relayed too (counted, and logged at a limited rate).
    case budgetExhausted

    /// The verdict for an attempt of cause `cause` to `host`, `retriesDone` retries into the exchange. `random`
    /// draws the jitter. Spends the budget when, and only when, the verdict is ``retry(after:)``.
    static func decide(
        _ cause: RetryPolicy.Cause, retryAfter: Int?, retriesDone: Int, policy: RetryPolicy, random: UInt64,
        budget: inout RetryBudget, host: RetryBudget.Host, now: UInt64
    ) -> RetryVerdict {
        guard
            case .retry(let wait) = policy.decide(
                cause: cause, retryAfter: retryAfter, retriesDone: retriesDone, random: random)
        else { return .refused }
        return budget.spendRetry(host, now: now) ? .retry(after: wait) : .budgetExhausted
    }
}
