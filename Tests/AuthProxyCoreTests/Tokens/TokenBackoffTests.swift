import Testing

@testable import AuthProxyCore

@Suite struct TokenBackoffTests {
    @Test func scheduleDoublesAndIsCappedAt30Seconds() {
        #expect(
            (0...8).map { TokenBackoff.delay(afterFailures: $0) } == [
                0, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000,
            ])
        #expect(TokenBackoff.delay(afterFailures: 1000) == 30000)
    }

    @Test func failuresBackOffAndSuccessResets() {
        var b = TokenBackoff()
        #expect(!b.isBackingOff(at: 0))
        #expect(b.failed(at: 10_000) == 1000)
        #expect(b.isBackingOff(at: 10_999))
        #expect(!b.isBackingOff(at: 11_000))
        #expect(b.secondsLeft(at: 10_001) == 1)
        #expect(b.failed(at: 11_000) == 2000)
        #expect(b.failed(at: 13_000) == 4000)
        #expect(b.retryAt == 17_000)
        #expect(b.secondsLeft(at: 13_500) == 4)  // rounded up: the 502 never says "0 s" too early
        b.succeeded()
        #expect(b.failures == 0 && !b.isBackingOff(at: 13_500))
        #expect(b.failed(at: 20_000) == 1000)
    }

    @Test func aRetryAfterOfTheTokenServiceIsWaitedForUpToFiveMinutes() {
        var b = TokenBackoff()
        // Longer than the schedule's step: the service's pause wins.
        #expect(b.failed(at: 0, retryAfter: 7000) == 7000)
        #expect(b.retryAt == 7000)
        // Shorter than the step: the schedule's (the second failure waits 2 s).
        #expect(b.failed(at: 7000, retryAfter: 500) == 2000)
        // An hour is cut to five minutes: the proxy asks again rather than go without tokens for an hour.
        #expect(b.failed(at: 9000, retryAfter: 3_600_000) == TokenBackoff.maxRetryAfter)
        // Five minutes on, the schedule has started again (failures that far apart are forgotten); a service still
        // limiting says so again with its next Retry-After.
        #expect(b.failed(at: 309_000, retryAfter: nil) == 1000)
    }

    @Test func oldFailuresAreForgotten() {
        var b = TokenBackoff()
        for t in stride(from: Int64(0), to: 200_000, by: 31_000) { b.failed(at: t) }
        #expect(b.failures == 7)
        // A failure long after the last one starts the schedule again.
        #expect(b.failed(at: 200_000 + TokenBackoff.forgetAfter + 1) == 1000)
    }
}

@Suite struct TokenRetryPolicyTests {
    typealias S = TokenRetryPolicy.Situation

    @Test func aCachedTokenIsRefreshedOnceAndRetried() {
        #expect(TokenRetryPolicy.decide(S(attempt: 1)) == .refreshAndRetry)
    }

    @Test func aFreshTokenRejectedMeansTheServerRejectsNewTokens() {
        // The token this request waited for, or the one its retry got: never another refresh.
        #expect(
            TokenRetryPolicy.decide(S(attempt: 1, tokenIsFresh: true))
                == .relay(reason: "the server rejects new tokens", serverRejectsNewTokens: true))
        #expect(
            TokenRetryPolicy.decide(S(attempt: 2))
                == .relay(reason: "the server rejects new tokens", serverRejectsNewTokens: true))
        #expect(
            TokenRetryPolicy.decide(S(attempt: 2, tokenIsFresh: true, backingOff: true))
                == .relay(reason: "the server rejects new tokens", serverRejectsNewTokens: true))
    }

    @Test func whileBackingOffTheRejectionIsRelayedWithoutAFetch() {
        guard case .relay(_, let fresh) = TokenRetryPolicy.decide(S(attempt: 1, backingOff: true)) else {
            Issue.record("expected a relay")
            return
        }
        #expect(!fresh)
    }

    @Test func otherReasonsToRelay() {
        #expect(
            TokenRetryPolicy.decide(S(attempt: 1, replayImpossible: "too large"))
                == .relay(reason: "too large", serverRejectsNewTokens: false))
        #expect(
            TokenRetryPolicy.decide(S(attempt: 1, refreshable: false))
                == .relay(reason: "the credential cannot be refreshed", serverRejectsNewTokens: false))
        #expect(TokenRetryPolicy.decide(S(attempt: 1, pregenerated: true, refreshable: false)) == .explainPregenerated)
    }
}

@Suite struct LockTests {
    /// Mutual exclusion under contention. (The old Lock passed `&storedProperty` to pthread: undefined
    /// behaviour that no test can show reliably; this checks the heap-allocated one works.)
    @Test func countsUnderContention() async {
        let lock = Lock()
        final class Box: @unchecked Sendable { var n = 0 }
        let box = Box()
        await withTaskGroup(of: Void.self) { g in
            for _ in 0..<8 {
                g.addTask { for _ in 0..<10_000 { lock.withLock { box.n += 1 } } }
            }
        }
        #expect(lock.withLock { box.n } == 80_000)
    }
}
