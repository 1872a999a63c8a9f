import Testing

@testable import AuthProxyCore

/// ``RetryVerdict``: the policy first, then the budget, which is spent only for a retry.
@Suite struct RetryVerdictTests {
    static let host = RetryBudget.Host(host: "a.example.com", port: 443)
    static let policy = RetryPolicy(maxRetries: 2, maxWaitSeconds: 5, baseBackoff: 100_000_000)

    static func verdict(
        _ cause: RetryPolicy.Cause, retryAfter: Int? = nil, retriesDone: Int = 0, budget: inout RetryBudget
    ) -> RetryVerdict {
        RetryVerdict.decide(
            cause, retryAfter: retryAfter, retriesDone: retriesDone, policy: policy, random: 0, budget: &budget,
            host: host, now: 1)
    }

    @Test func aRetryThePolicyAllowsSpendsTheBudget() {
        var budget = RetryBudget(ratioPercent: 0, minimum: 1)
        #expect(Self.verdict(.reset, budget: &budget) == .retry(after: 50_000_000))
        // The minimum of one is spent: the next is refused by the budget.
        #expect(Self.verdict(.reset, budget: &budget) == .budgetExhausted)
    }

    /// A refusal by the policy leaves the budget as it was.
    @Test(arguments: [
        (RetryPolicy.Cause.reset, Int?.none, 2),  // no attempts left
        (.status429, nil, 0),  // a 429 without Retry-After is the client's to wait for
        (.status503, 60, 0),  // a Retry-After over the cap
    ])
    func aRefusalByThePolicySpendsNothing(cause: RetryPolicy.Cause, retryAfter: Int?, retriesDone: Int) {
        var budget = RetryBudget(ratioPercent: 0, minimum: 1)
        #expect(Self.verdict(cause, retryAfter: retryAfter, retriesDone: retriesDone, budget: &budget) == .refused)
        #expect(budget.spendRetry(Self.host, now: 1) == true)
    }

    @Test func aRetryAfterWithinTheCapIsWaitedFor() {
        var budget = RetryBudget()
        #expect(Self.verdict(.status503, retryAfter: 2, budget: &budget) == .retry(after: 2_000_000_000))
    }
}
