import Testing

@testable import AuthProxyCore

/// The cap + FIFO queue decisions, with time passed in.
@Suite struct ConcurrencyQueueTests {
    let second: UInt64 = 1_000_000_000

    @Test func grantsUpToTheCapThenQueuesThenRefuses() {
        var q = ConcurrencyQueue(limit: ConcurrencyLimit(maxConcurrent: 2, maxQueued: 2, queueTimeoutSeconds: 10))
        #expect(q.admit(id: 1, now: 0) == .granted)
        #expect(q.admit(id: 2, now: 0) == .granted)
        #expect(q.admit(id: 3, now: 0) == .queued(deadline: 10 * second))
        #expect(q.admit(id: 4, now: second) == .queued(deadline: 11 * second))
        if case .refused(let after) = q.admit(id: 5, now: second) { #expect(after >= 1) } else { Issue.record() }
        #expect(q.open == 2 && q.queued == 2)
    }

    @Test func releasesGrantInArrivalOrder() {
        var q = ConcurrencyQueue(limit: ConcurrencyLimit(maxConcurrent: 1, maxQueued: 10, queueTimeoutSeconds: 10))
        #expect(q.admit(id: 1, now: 0) == .granted)
        for id in 2...5 { _ = q.admit(id: UInt64(id), now: 0) }
        #expect(q.release(held: second, now: second).granted == [2])
        #expect(q.release(held: second, now: 2 * second).granted == [3])
        #expect(q.open == 1 && q.queued == 2)
        // A newcomer does not overtake the queue even when a slot happens to be free.
        _ = q.release(held: second, now: 3 * second)
        #expect(q.admit(id: 9, now: 3 * second) == .queued(deadline: 13 * second))
    }

    @Test func waitersPastTheirDeadlineExpireInsteadOfTakingASlot() {
        var q = ConcurrencyQueue(limit: ConcurrencyLimit(maxConcurrent: 1, maxQueued: 10, queueTimeoutSeconds: 5))
        _ = q.admit(id: 1, now: 0)
        _ = q.admit(id: 2, now: 0)  // deadline 5 s
        _ = q.admit(id: 3, now: 3 * second)  // deadline 8 s
        let out = q.release(held: 6 * second, now: 6 * second)
        #expect(out.expired == [2] && out.granted == [3])
        #expect(q.open == 1 && q.queued == 0)
    }

    @Test func expireAndCancelLeaveTheQueue() {
        var q = ConcurrencyQueue(limit: ConcurrencyLimit(maxConcurrent: 1, maxQueued: 10, queueTimeoutSeconds: 5))
        _ = q.admit(id: 1, now: 0)
        _ = q.admit(id: 2, now: 0)
        _ = q.admit(id: 3, now: 2 * second)
        _ = q.admit(id: 4, now: 2 * second)
        let cancelled = q.cancel(id: 3)
        let again = q.cancel(id: 3)
        #expect(cancelled && !again)
        #expect(q.expire(now: 5 * second) == [2])
        #expect(q.queued == 1)
        #expect(q.release(held: 1, now: 6 * second).granted == [4])
        let granted = q.cancel(id: 4)
        #expect(!granted)  // granted, no longer waiting
    }

    @Test func retryAfterFollowsTheAverageHoldWithinBounds() {
        var q = ConcurrencyQueue(limit: ConcurrencyLimit(maxConcurrent: 2, maxQueued: 0, queueTimeoutSeconds: 30))
        _ = q.admit(id: 1, now: 0)
        _ = q.admit(id: 2, now: 0)
        // Nothing measured yet: 1 s.
        #expect(q.admit(id: 3, now: 0) == .refused(retryAfterSeconds: 1))
        _ = q.release(held: 4 * second, now: 4 * second)
        _ = q.admit(id: 4, now: 4 * second)
        // 4 s per slot, the requester first in line for one of 2 slots: 2 s.
        #expect(q.admit(id: 5, now: 4 * second) == .refused(retryAfterSeconds: 2))
        #expect(q.retryAfter(ahead: 1000) == 30)  // never past the queue timeout
    }

    @Test func aRaisedCapGrantsWaitersAtOnce() {
        var q = ConcurrencyQueue(limit: ConcurrencyLimit(maxConcurrent: 1, maxQueued: 10, queueTimeoutSeconds: 5))
        _ = q.admit(id: 1, now: 0)
        _ = q.admit(id: 2, now: 0)
        _ = q.admit(id: 3, now: 0)
        let out = q.update(ConcurrencyLimit(maxConcurrent: 3, maxQueued: 10, queueTimeoutSeconds: 5), now: second)
        #expect(out.granted == [2, 3] && q.open == 3)
        // Lowered: the open ones finish, nobody new starts until under the cap.
        _ = q.update(ConcurrencyLimit(maxConcurrent: 1, maxQueued: 10, queueTimeoutSeconds: 5), now: second)
        _ = q.admit(id: 4, now: second)
        #expect(q.release(held: 1, now: second).granted == [])
        #expect(q.release(held: 1, now: second).granted == [])
        #expect(q.release(held: 1, now: second).granted == [4])
    }

    @Test func aLongQueueStaysBoundedInMemory() {
        var q = ConcurrencyQueue(limit: ConcurrencyLimit(maxConcurrent: 1, maxQueued: 5, queueTimeoutSeconds: 5))
        _ = q.admit(id: 0, now: 0)
        for id in 1...10_000 {
            _ = q.admit(id: UInt64(id), now: 0)
            _ = q.release(held: 1, now: 1)
        }
        #expect(q.open == 1 && q.queued == 0)
    }
}

/// The process-wide limiter: slots given back when dropped, queued waiters granted through their callbacks, a
/// waiter that leaves, and the timeout.
@Suite struct UpstreamLimiterTests {
    let key = UpstreamLimiter.Key(scope: .host, name: "gis.example")

    final class Box: @unchecked Sendable {
        var grants: [UpstreamLimiter.Grant] = []
    }

    @Test func droppedSlotsWakeTheNextWaiter() {
        let l = UpstreamLimiter()
        l.configure([key: ConcurrencyLimit(maxConcurrent: 1, maxQueued: 5, queueTimeoutSeconds: 30)])
        let box = Box()
        var first: UpstreamSlot? = nil
        if case .granted(let s) = l.acquire(key, now: UpstreamLimiter.uptime(), onGrant: { _ in }) { first = s }
        #expect(first != nil)
        var wait: QueuedWait? = nil
        if case .queued(let w, _) = l.acquire(key, now: UpstreamLimiter.uptime(), onGrant: { box.grants.append($0) }) {
            wait = w
        }
        #expect(wait != nil && box.grants.isEmpty)
        #expect(l.snapshot().first?.queued == 1)
        first = nil  // released
        #expect(box.grants.count == 1)
        if case .granted = box.grants.first {} else { Issue.record("not granted") }
        #expect(l.snapshot().first?.open == 1)
        box.grants = []  // the granted slot is dropped: given back
        _ = wait
        #expect(l.snapshot().first?.open == 0)
    }

    @Test func aWaiterThatLeavesOrTimesOutIsGone() {
        let l = UpstreamLimiter()
        l.configure([key: ConcurrencyLimit(maxConcurrent: 1, maxQueued: 5, queueTimeoutSeconds: 30)])
        let hold = l.acquire(key, now: UpstreamLimiter.uptime(), onGrant: { _ in })
        var leaving: UpstreamLimiter.Acquisition? = l.acquire(key, now: UpstreamLimiter.uptime(), onGrant: { _ in })
        #expect(l.snapshot().first?.queued == 1)
        leaving = nil
        #expect(l.snapshot().first?.queued == 0)
        _ = leaving
        if case .queued(let w, _) = l.acquire(key, now: UpstreamLimiter.uptime(), onGrant: { _ in }) {
            #expect(l.timeOut(w) != nil)
            #expect(l.timeOut(w) == nil)
        } else {
            Issue.record("not queued")
        }
        #expect(l.snapshot().first?.refused[.queueTimeout] == 1)
        _ = hold
    }

    @Test func aRemovedCapIsForgottenOnceIdle() {
        let l = UpstreamLimiter()
        l.configure([key: ConcurrencyLimit(maxConcurrent: 1)])
        var slot: UpstreamLimiter.Acquisition? = l.acquire(key, now: 0, onGrant: { _ in })
        l.configure([:])
        #expect(l.snapshot().count == 1)
        slot = nil
        _ = slot
        #expect(l.snapshot().isEmpty)
        // Asked for after its removal (a request planned before the reload): granted, nothing counted.
        if case .granted = l.acquire(key, now: 0, onGrant: { _ in }) {} else { Issue.record() }
        #expect(l.snapshot().isEmpty)
    }
}

@Suite struct DailyQuotaTests {
    @Test func countsPerUTCDayAndAnswersTheTimeToMidnight() {
        var q = DailyQuota()
        let day: Int64 = 86_400
        let t = 20_000 * day + 3600  // 01:00 UTC
        for _ in 0..<3 { #expect(q.take(quota: 3, now: t) == .allowed) }
        #expect(q.take(quota: 3, now: t + 10) == .limited(retryAfterSeconds: Int(day - 3610)))
        #expect(q.take(quota: 3, now: 20_001 * day) == .allowed)
        #expect(q.used == 1)
        #expect(DailyQuota.secondsToMidnight(20_001 * day - 1) == 1)
    }
}

@Suite struct ConcurrencyCapsTests {
    @Test func aPortSpecificEntryWinsOverTheHostsAndCredentialsAreNamed() throws {
        let c = try ConfigLoader(environment: [:]).parse(
            """
            [[upstream]]
            host = "GIS.example.com"
            max_concurrent = 8

            [[upstream]]
            host = "gis.example.com"
            port = 6443
            max_concurrent = 2
            max_queued = 0
            queue_timeout_seconds = 5

            [[credential]]
            name = "k"
            type = "header"
            match = ["https://gis.example.com/"]
            headers = { "X-K" = "v" }
            max_concurrent = 3
            daily_quota = 1000
            rate_limit = { requests = 10, per_seconds = 1, scope = "credential" }
            """)
        let caps = ConcurrencyCaps(upstreams: c.upstreamLimits, credentials: c.credentials)
        #expect(caps.host("gis.example.com", port: 6443)?.name == "gis.example.com:6443")
        #expect(caps.host("gis.example.com", port: 443)?.name == "gis.example.com")
        #expect(caps.host("other.example.com", port: 443) == nil)
        #expect(caps.limit(of: .init(scope: .host, name: "gis.example.com:6443"))?.maxQueued == 0)
        #expect(caps.credentials["k"] == ConcurrencyLimit(maxConcurrent: 3))
        #expect(c.credentials[0].limits.dailyQuota == 1000)
        #expect(c.credentials[0].rateLimit?.scope == .credential)
    }

    @Test func badEntriesNameTheKeyAndLine() {
        let l = ConfigLoader(environment: [:])
        expectRejected(
            l, "[[upstream]]\nmax_concurrent = 3\n", key: "upstream[0].host", line: 1, fragment: "needs host")
        expectRejected(
            l, "[[upstream]]\nhost = \"https://gis.example.com/\"\nmax_concurrent = 3\n", key: "upstream[0].host",
            line: 2, fragment: "not a host name")
        expectRejected(
            l, "[[upstream]]\nhost = \"gis.example.com\"\n", key: "upstream[0].max_concurrent", line: 1,
            fragment: "needs max_concurrent")
        expectRejected(
            l,
            "[[upstream]]\nhost = \"a.example\"\nmax_concurrent = 1\n[[upstream]]\nhost = \"a.example\"\nmax_concurrent = 2\n",
            key: "upstream[1].host", line: 5, fragment: "duplicate")
        expectRejected(
            l, "[[upstream]]\nhost = \"a.example\"\nmax_queued = 3\nmax_concurrent = 0\n",
            key: "upstream[0].max_concurrent", line: 4, fragment: "outside")
        expectRejected(
            l,
            "[[credential]]\nname = \"k\"\ntype = \"header\"\nmatch = [\"https://a.example/\"]\nheaders = { \"X\" = \"v\" }\nqueue_timeout_seconds = 3\n",
            key: "credential[0].queue_timeout_seconds", line: 6, fragment: "needs max_concurrent")
        expectRejected(
            l,
            "[[credential]]\nname = \"k\"\ntype = \"header\"\nmatch = [\"https://a.example/\"]\nheaders = { \"X\" = \"v\" }\nrate_limit = { requests = 1, per_seconds = 1, scope = \"fleet\" }\n",
            key: "credential[0].rate_limit.scope", line: 6, fragment: "fleet")
    }

    @Test func shutdownKeys() throws {
        let c = try ConfigLoader(environment: [:]).parse(
            "[proxy]\nmin_shutdown_delay_seconds = 15\n[admin]\nlisten = \"127.0.0.1:9128\"\nquitquitquit = true\n")
        #expect(c.minShutdownDelaySeconds == 15)
        #expect(c.admin?.quitquitquit == true)
        #expect(
            try ConfigLoader(environment: [:]).parse("[admin]\nlisten = \"127.0.0.1:9128\"\n").admin?.quitquitquit
                == false)
    }
}
