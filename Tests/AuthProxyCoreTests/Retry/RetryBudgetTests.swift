import Testing

@testable import AuthProxyCore

/// ``RetryBudget`` with a fake clock: retries stay within the ratio of a host's requests, plus the minimum.
@Suite struct RetryBudgetTests {
    static let s: UInt64 = 1_000_000_000
    static let a = RetryBudget.Host(host: "a.example.com", port: 443)
    static let b = RetryBudget.Host(host: "b.example.com", port: 443)

    /// Spends retries until refused; returns how many were granted.
    static func drain(_ budget: inout RetryBudget, _ host: RetryBudget.Host, now: UInt64) -> Int {
        var n = 0
        while budget.spendRetry(host, now: now) { n += 1 }
        return n
    }

    @Test func aQuietHostStillGetsTheMinimum() {
        var budget = RetryBudget(ratioPercent: 20, minimum: 3)
        #expect(Self.drain(&budget, Self.a, now: 0) == 3)
    }

    @Test func retriesAreAShareOfRequestsPlusTheMinimum() {
        var budget = RetryBudget(ratioPercent: 20, minimum: 3)
        for _ in 0..<100 { budget.request(Self.a, now: 1) }
        #expect(Self.drain(&budget, Self.a, now: 2) == 23)
        // Another host has a budget of its own.
        #expect(Self.drain(&budget, Self.b, now: 2) == 3)
        // More requests buy more retries.
        for _ in 0..<10 { budget.request(Self.a, now: 3) }
        #expect(Self.drain(&budget, Self.a, now: 3) == 2)
    }

    @Test func thePreviousWindowFadesOutAsTimePasses() {
        var budget = RetryBudget(window: 10 * Self.s, ratioPercent: 20, minimum: 0)
        for _ in 0..<100 { budget.request(Self.a, now: 0) }
        #expect(Self.drain(&budget, Self.a, now: 0) == 20)
        // Half of the previous window still counts 5 s into the next: 50 requests, 10 retries, none left.
        #expect(Self.drain(&budget, Self.a, now: 15 * Self.s) == 0)
        // Two windows later everything is forgotten.
        for _ in 0..<10 { budget.request(Self.a, now: 25 * Self.s) }
        #expect(Self.drain(&budget, Self.a, now: 25 * Self.s) == 2)
    }

    @Test func aBurstAtTheBoundaryDoesNotResetTheBudget() {
        var budget = RetryBudget(window: 10 * Self.s, ratioPercent: 20, minimum: 0)
        for _ in 0..<100 { budget.request(Self.a, now: 9 * Self.s) }
        #expect(Self.drain(&budget, Self.a, now: 9 * Self.s) == 20)
        // Just after the boundary the 20 retries still weigh almost fully against the 100 requests.
        #expect(Self.drain(&budget, Self.a, now: 10 * Self.s + 1) == 0)
    }

    @Test func noRetriesWithoutRequestsWhenTheMinimumIsZero() {
        var budget = RetryBudget(ratioPercent: 20, minimum: 0)
        for _ in 0..<4 { budget.request(Self.a, now: 0) }
        #expect(Self.drain(&budget, Self.a, now: 0) == 0)
        budget.request(Self.a, now: 0)
        #expect(Self.drain(&budget, Self.a, now: 0) == 1)
    }

    @Test func idleHostsArePruned() {
        var budget = RetryBudget(window: 10 * Self.s)
        budget.request(Self.a, now: 0)
        budget.request(Self.b, now: 15 * Self.s)
        budget.prune(now: 19 * Self.s)
        #expect(budget.hosts.count == 2)
        budget.prune(now: 20 * Self.s)
        #expect(Array(budget.hosts.keys) == [Self.b])
    }
}
