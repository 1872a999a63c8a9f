import Testing

@testable import AuthProxyCore

/// The arithmetic of the fleet's shared limits without Redis: leases, shares, windows, the fallback and what it
/// reports back; the lease script's reply, the key names and the configuration.
@Suite struct FleetWindowTests {
    let rate = FleetLimit.rate("gis", RateLimit(requests: 30, perSeconds: 60, scope: .credential))

    @Test func sharesAndBatchesAreRoundedDownAndBounded() {
        #expect(rate.share(replicas: 3) == 10)
        #expect(rate.share(replicas: 4) == 7)  // 4 × 7 = 28 ≤ 30
        #expect(rate.share(replicas: 3, afterFleetUsed: 20) == 3)
        #expect(rate.share(replicas: 3, afterFleetUsed: 40) == 0)
        #expect(FleetLimit.daily("m", quota: 2).share(replicas: 3) == 0)  // fewer requests than replicas: none
        #expect(rate.batch(replicas: 3) == 1)
        #expect(FleetLimit.daily("m", quota: 10_000).batch(replicas: 3) == 100)
        #expect(FleetLimit.daily("m", quota: 3_000).batch(replicas: 3) == 100)
        #expect(FleetLimit.daily("m", quota: 600).batch(replicas: 3) == 20)
        // Stranded permits (each replica holding a batch it does not spend) stay within a tenth of the limit.
        for (limit, replicas) in [(30, 3), (100, 3), (1000, 7), (50_000, 2), (7, 10)] {
            let f = FleetLimit(credential: "c", kind: .rate, requests: limit, windowSeconds: 60)
            #expect(replicas * (f.batch(replicas: replicas) - 1) <= max(0, limit / 10))
            #expect(replicas * f.share(replicas: replicas) <= limit)
        }
    }

    @Test func aRequestWithoutPermitAsksForALeaseAndSpendsWhatCame() {
        var w = FleetWindow(limit: rate)
        #expect(w.take(now: 1_000, redisUsable: true, replicas: 3) == .lease)
        let req = w.leaseRequest(waiting: 4, replicas: 3)
        #expect(req == .init(want: 4, carry: 0, carryWindow: -1))
        w.leased(.init(granted: 4, used: 4, window: 7, millisLeft: 30_000), sentAt: 1_000, carried: 0)
        for _ in 0..<4 { #expect(w.take(now: 2_000, redisUsable: true, replicas: 3) == .allowed) }
        #expect(w.permits == 0)
        #expect(w.take(now: 2_000, redisUsable: true, replicas: 3) == .lease)
        // Redis had 2 of the batch left: the window is used up, refused until its end (from the send time).
        w.leased(.init(granted: 2, used: 30, window: 7, millisLeft: 20_000), sentAt: 10_000, carried: 0)
        #expect(w.take(now: 10_100, redisUsable: true, replicas: 3) == .allowed)
        #expect(w.take(now: 10_100, redisUsable: true, replicas: 3) == .allowed)
        #expect(w.take(now: 10_100, redisUsable: true, replicas: 3) == .limited(retryAfterSeconds: 20, share: nil))
        #expect(w.used(now: 10_100) == 30)
        // The next window: ask again (the count starts again in Redis).
        #expect(w.take(now: 30_000, redisUsable: true, replicas: 3) == .lease)
    }

    @Test func permitsOfAWindowThatIsOverAreVoid() {
        var w = FleetWindow(limit: rate)
        w.leased(.init(granted: 5, used: 5, window: 7, millisLeft: 1_000), sentAt: 0, carried: 0)
        #expect(w.take(now: 1_000, redisUsable: true, replicas: 3) == .lease)
        w.leased(.init(granted: 1, used: 1, window: 8, millisLeft: 59_000), sentAt: 1_000, carried: 0)
        #expect(w.permits == 1)
    }

    @Test func permitsUnspentForAWhileGoBack() {
        var w = FleetWindow(limit: rate)
        w.leased(.init(granted: 6, used: 10, window: 7, millisLeft: 60_000), sentAt: 1_000, carried: 0)
        #expect(w.releaseIdle(now: 2_500, idleMillis: 2_000) == nil)  // just leased
        #expect(w.take(now: 2_900, redisUsable: true, replicas: 3) == .allowed)
        #expect(w.releaseIdle(now: 4_000, idleMillis: 2_000) == nil)  // spent from 1 s ago
        let back = w.releaseIdle(now: 5_000, idleMillis: 2_000)
        #expect(back?.count == 5 && back?.window == 7)
        #expect(w.permits == 0 && w.used(now: 5_000) == 5)
        #expect(w.releaseIdle(now: 9_000, idleMillis: 2_000) == nil)  // nothing left
        // The next request leases again.
        #expect(w.take(now: 9_000, redisUsable: true, replicas: 3) == .lease)
        // Permits of a window that is over are not given back (their count expires with it).
        w.leased(.init(granted: 3, used: 8, window: 7, millisLeft: 1_000), sentAt: 9_000, carried: 0)
        #expect(w.releaseIdle(now: 20_000, idleMillis: 2_000) == nil)
    }

    @Test func withoutRedisAReplicaAllowsItsShareOfWhatTheFleetLeft() {
        var w = FleetWindow(limit: rate)
        w.leased(.init(granted: 2, used: 21, window: 7, millisLeft: 40_000), sentAt: 0, carried: 0)
        // Permits held serve first: Redis counted them.
        #expect(w.take(now: 100, redisUsable: false, replicas: 3) == .allowed)
        #expect(w.take(now: 100, redisUsable: false, replicas: 3) == .allowed)
        // Then (30 − 21) ÷ 3 = 3 of this window.
        for _ in 0..<3 { #expect(w.take(now: 200, redisUsable: false, replicas: 3) == .allowed) }
        #expect(w.take(now: 200, redisUsable: false, replicas: 3) == .limited(retryAfterSeconds: 40, share: 10))
        #expect(w.used(now: 200) == 24)
        // The next window (following Redis's, not this clock's alignment): the limit ÷ replicas.
        for _ in 0..<10 { #expect(w.take(now: 41_000, redisUsable: false, replicas: 3) == .allowed) }
        #expect(w.take(now: 41_000, redisUsable: false, replicas: 3) == .limited(retryAfterSeconds: 59, share: 10))
        #expect(w.span(at: 41_000) == .init(index: 8, endsAt: 100_000))
        // Redis is back in that window: the 10 allowed alone are carried into its count.
        #expect(w.take(now: 42_000, redisUsable: true, replicas: 3) == .lease)
        let req = w.leaseRequest(waiting: 1, replicas: 3)
        #expect(req == .init(want: 1, carry: 10, carryWindow: 8))
        w.leased(.init(granted: 1, used: 25, window: 8, millisLeft: 57_000), sentAt: 42_000, carried: req.carry)
        #expect(w.fallbackSpent == 0)
        #expect(w.take(now: 42_000, redisUsable: true, replicas: 3) == .allowed)
    }

    @Test func neverConnectedTheWindowsFollowThisClock() {
        var w = FleetWindow(limit: rate)
        #expect(w.span(at: 125_000) == .init(index: 2, endsAt: 180_000))
        for _ in 0..<10 { #expect(w.take(now: 125_000, redisUsable: false, replicas: 3) == .allowed) }
        #expect(w.take(now: 125_000, redisUsable: false, replicas: 3) == .limited(retryAfterSeconds: 55, share: 10))
        #expect(w.take(now: 180_000, redisUsable: false, replicas: 3) == .allowed)
    }

    @Test func aDailyQuotaHasUTCDays() {
        let q = FleetLimit.daily("metered", quota: 300)
        var w = FleetWindow(limit: q)
        let noon: Int64 = (20_000 * 86_400 + 43_200) * 1000
        #expect(w.span(at: noon) == .init(index: 20_000, endsAt: 20_001 * 86_400 * 1000))
        for _ in 0..<100 { #expect(w.take(now: noon, redisUsable: false, replicas: 3) == .allowed) }
        #expect(w.take(now: noon, redisUsable: false, replicas: 3) == .limited(retryAfterSeconds: 43_200, share: 100))
    }

    @Test func theLeaseReplyIsReadStrictly() {
        let ok = RedisReply.array([.integer(3), .integer(12), .integer(29_000_000), .integer(1_500)])
        #expect(FleetWindow.LeaseResult(ok) == .init(granted: 3, used: 12, window: 29_000_000, millisLeft: 1_500))
        #expect(FleetWindow.LeaseResult(.array([.integer(1), .integer(2)])) == nil)
        #expect(FleetWindow.LeaseResult(.string(Array("1".utf8))) == nil)
        #expect(FleetWindow.LeaseResult(.array([.integer(-1), .integer(0), .integer(0), .integer(0)])) == nil)
    }

    @Test func limitKeysNameNoCredentialAndChangeWithTheLimit() throws {
        let keys = try #require(ClusterKeys(stateKey: "a state key for tests 0123456789", prefix: "fleet:"))
        let a = keys.limitKey(rate)
        #expect(a.hasPrefix("fleet:q:") && a.count == "fleet:q:".count + 64)
        #expect(!a.contains("gis"))
        #expect(keys.limitKey(rate) == a)
        #expect(keys.limitKey(.rate("gis", RateLimit(requests: 31, perSeconds: 60, scope: .credential))) != a)
        #expect(keys.limitKey(.daily("gis", quota: 30)) != a)
    }

    @Test func replicasIsRequiredWithAFleetWideLimit() throws {
        let base = """
            [proxy]
            state_key = "0123456789abcdef0123456789abcdef"
            [cluster]
            redis = "redis://127.0.0.1:6379/0"

            """
        let cred = """
            [[credential]]
            name = "metered"
            type = "header"
            match = ["http://127.0.0.1:9/"]
            headers = { "X-Key" = "k" }
            daily_quota = 100

            """
        do throws(ConfigError) {
            _ = try ConfigLoader(environment: [:]).parse(base + cred)
            Issue.record("accepted without replicas")
        } catch {
            #expect(error.key == "cluster.replicas" && error.description.contains("replicas = 3"))
        }
        let withReplicas = base.replacingOccurrences(of: "[cluster]\n", with: "[cluster]\nreplicas = 3\n")
        let c = try ConfigLoader(environment: [:]).parse(withReplicas + cred)
        #expect(c.cluster?.replicas == 3)
        // Without a fleet-wide limit the key is not needed; out of range is an error naming it.
        #expect(try ConfigLoader(environment: [:]).parse(base).cluster?.replicas == nil)
        let zero = base.replacingOccurrences(of: "[cluster]\n", with: "[cluster]\nreplicas = 0\n")
        #expect(throws: ConfigError.self) { try ConfigLoader(environment: [:]).parse(zero) }
    }
}
