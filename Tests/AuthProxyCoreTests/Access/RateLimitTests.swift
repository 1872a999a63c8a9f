import Testing

@testable import AuthProxyCore

@Suite struct RateLimitTests {
    let second: UInt64 = 1_000_000_000

    @Test func burstThenRefill() {
        var b = TokenBucket(limit: RateLimit(requests: 3, perSeconds: 60), now: 0)
        #expect(b.take(now: 0) == .allowed)
        #expect(b.take(now: 1) == .allowed)
        #expect(b.take(now: 2) == .allowed)
        // One token per 20 s: the next is 20 s away.
        #expect(b.take(now: 3) == .limited(retryAfterSeconds: 20))
        #expect(b.take(now: 10 * second) == .limited(retryAfterSeconds: 10))
        #expect(b.take(now: 20 * second + 3) == .allowed)
        #expect(b.take(now: 20 * second + 4) == .limited(retryAfterSeconds: 20))
        #expect(!b.isFull(now: 21 * second))
        #expect(b.isFull(now: 200 * second))
    }

    @Test func refillNeverExceedsTheLimit() {
        var b = TokenBucket(limit: RateLimit(requests: 2, perSeconds: 1), now: 0)
        for _ in 0..<2 { #expect(b.take(now: 1000 * second) == .allowed) }
        #expect(b.take(now: 1000 * second) == .limited(retryAfterSeconds: 1))
    }

    @Test func clientsHaveSeparateBuckets() {
        let r = RateLimiter()
        let limit = RateLimit(requests: 1, perSeconds: 60)
        #expect(r.take(credential: "c", client: "a", limit: limit, now: 0) == .allowed)
        #expect(r.take(credential: "c", client: "a", limit: limit, now: 1) != .allowed)
        #expect(r.take(credential: "c", client: "b", limit: limit, now: 2) == .allowed)
        #expect(r.take(credential: "d", client: "a", limit: limit, now: 3) == .allowed)
    }

    @Test func fullBucketsAreForgotten() {
        let r = RateLimiter()
        let limit = RateLimit(requests: 5, perSeconds: 1)
        for i in 0..<100 { _ = r.take(credential: "c", client: "client\(i)", limit: limit, now: 0) }
        #expect(r.count == 100)
        _ = r.take(credential: "c", client: "late", limit: limit, now: 60 * second)
        #expect(r.count == 1)
    }

    @Test func atTheCapTheLeastRecentlyUsedAreForgottenNotEveryone() {
        let r = RateLimiter()
        let limit = RateLimit(requests: 1, perSeconds: 3600)
        #expect(r.take(credential: "c", client: "early", limit: limit, now: 0) == .allowed)
        for i in 0..<(RateLimiter.maxBuckets - 2) {
            _ = r.take(credential: "c", client: "c\(i)", limit: limit, now: UInt64(i + 1))
        }
        // The most recent client is still limited after the cap forced an eviction.
        #expect(r.take(credential: "c", client: "recent", limit: limit, now: 200_000) == .allowed)
        #expect(r.take(credential: "c", client: "recent", limit: limit, now: 200_001) != .allowed)
        #expect(
            r.take(credential: "c", client: "c\(RateLimiter.maxBuckets - 3)", limit: limit, now: 200_002) != .allowed)
        #expect(r.count <= RateLimiter.maxBuckets / 2 + 2)
    }

    @Test func connectionLimits() throws {
        let l = ConnectionLimiter(total: 3, perClient: 2)
        let a = try #require(IPAddress.parse("127.0.0.1"))
        let b = try #require(IPAddress.parse("127.0.0.2"))
        #expect(l.acquire(a) == nil)
        #expect(l.acquire(a) == nil)
        #expect(l.acquire(a) == .perClient)
        #expect(l.acquire(b) == nil)
        #expect(l.acquire(b) == .total)
        l.release(a)
        #expect(l.acquire(b) == nil)
        #expect(l.openCount == 3)
        l.release(a); l.release(b); l.release(b)
        #expect(l.openCount == 0)
        // Every refusal is counted, by limit.
        #expect(l.refusals == ConnectionLimiter.Refusals(total: 1, perClient: 1))
    }
}

/// A reload changes the connection limits in place: the open count carries over.
@Suite struct ConnectionLimiterReloadTests {
    @Test func loweredLimitsApplyToNewConnectionsAndSlotsAreStillGivenBack() throws {
        let l = ConnectionLimiter(total: 3, perClient: 3)
        let a = try #require(IPAddress.parse("10.0.0.1"))
        #expect(l.acquire(a) == nil)
        #expect(l.acquire(a) == nil)
        l.setLimits(total: 1, perClient: 1)
        #expect(l.total == 1 && l.perClient == 1)
        #expect(l.acquire(a) == .total)
        l.release(a)
        l.release(a)
        #expect(l.openCount == 0)
        #expect(l.acquire(a) == nil)
    }
}
