import Logging
import Testing

@testable import AuthProxyCore

/// When the token service acts without a request — the probe after a backoff, the background refresh of a token
/// in its refresh margin, the next look of prefetching — decided on a ``FakeClock``: the decisions the service
/// turns into timers on its queue (``ProbeSchedule``, ``PrefetchPlan``), and the service reading its injected
/// clock where a decision takes `now`.
@Suite struct TokenSchedulingTests {
    typealias Cache = TokenCache<String>

    static let key = "app|https://gis.example.com/arcgis"
    static let down = TokenError(credential: "app", message: "token service https://gis.example.com failed: timeout")

    static func token(_ value: String, issued: Int64, lifetime: Int64) -> IssuedToken {
        IssuedToken(value: value, expires: issued + lifetime, issued: issued, ssl: false, referer: nil)
    }

    /// Starts a token request for `key` now and completes it with `result` at once.
    static func fetch(
        _ cache: inout Cache, key: String = key, clock: FakeClock, _ result: Result<IssuedToken, TokenError>
    ) {
        guard
            case .startFetch(let ticket) = cache.acquire(
                key: key, credential: "app", now: clock.nowMillis(), waiter: "setup")
        else {
            Issue.record("expected a token request to start")
            return
        }
        _ = cache.complete(ticket, with: result, now: clock.nowMillis())
    }

    // MARK: - the probe after a failed token request

    @Test func afterAFailedFetchTheProbeIsScheduledForTheBackoffsRetryTime() {
        let clock = FakeClock(1_700_000_000_000)
        var cache = Cache()
        Self.fetch(&cache, clock: clock, .failure(Self.down))  // backs off 1 s

        clock.advance(300)
        let wanted = cache.acquire(key: Self.key, credential: "app", now: clock.nowMillis(), waiter: "a")
        #expect(ProbeSchedule.delay(for: wanted, now: clock.nowMillis()) == 700)
        // Requests meanwhile get the error at once and schedule no second probe.
        clock.advance(100)
        let again = cache.acquire(key: Self.key, credential: "app", now: clock.nowMillis(), waiter: "b")
        #expect(ProbeSchedule.delay(for: again, now: clock.nowMillis()) == nil)

        // The timer fires when the backoff ends: the probe starts a token request.
        clock.advance(600)
        guard case .startFetch(let ticket)? = cache.probeDue(key: Self.key, now: clock.nowMillis()) else {
            Issue.record("the probe at the end of the backoff should start a token request")
            return
        }
        _ = cache.complete(ticket, with: .failure(Self.down), now: clock.nowMillis())

        // Failed again: the next probe waits the backoff's second step (2 s) from that failure.
        clock.advance(50)
        let third = cache.acquire(key: Self.key, credential: "app", now: clock.nowMillis(), waiter: "c")
        #expect(ProbeSchedule.delay(for: third, now: clock.nowMillis()) == 1_950)
    }

    @Test func aProbeWhoseRetryTimePassedBeforeItWasScheduledRunsAtOnce() {
        let clock = FakeClock(1_700_000_000_000)
        var cache = Cache()
        Self.fetch(&cache, clock: clock, .failure(Self.down))
        let wanted = cache.acquire(key: Self.key, credential: "app", now: clock.nowMillis(), waiter: "a")
        // The service reads the clock again when it schedules: a slow queue may be past the retry time.
        clock.advance(5_000)
        #expect(ProbeSchedule.delay(for: wanted, now: clock.nowMillis()) == 0)
        #expect(ProbeSchedule.delay(for: Cache.Lookup.wait, now: clock.nowMillis()) == nil)
    }

    // MARK: - background refresh inside the refresh margin

    @Test func aTokenIsRefreshedInTheBackgroundFromTheMomentItEntersItsRefreshMargin() {
        let clock = FakeClock(1_700_000_000_000)
        var cache = Cache()
        let issued = clock.nowMillis()
        let t1 = Self.token("T1", issued: issued, lifetime: 3_600_000)  // margin: 5 min
        Self.fetch(&cache, clock: clock, .success(t1))
        let due = issued + 3_600_000 - 300_000
        func plan() -> (PrefetchPlan.Action, Int64?) {
            PrefetchPlan.next(key: Self.key, in: cache, now: clock.nowMillis())
        }
        func refreshDue() -> Bool? { cache.cached(key: Self.key, now: clock.nowMillis())?.refreshDue }

        // Prefetching looks again exactly when the margin begins.
        #expect(plan() == (.none, due - issued))

        clock.advance(due - issued - 1)
        #expect(refreshDue() == false)
        #expect(cache.refreshInBackground(key: Self.key, credential: "app", now: clock.nowMillis()) == .ready(t1))
        // A millisecond before the margin, the next look is not a busy loop.
        #expect(plan() == (.none, PrefetchPlan.minimumWaitMillis))

        clock.advance(1)
        #expect(refreshDue() == true)
        #expect(plan() == (.refresh, PrefetchPlan.pollMillis))
        let refresh = cache.refreshInBackground(key: Self.key, credential: "app", now: clock.nowMillis())
        guard case .startFetch(let ticket) = refresh else {
            Issue.record("a token in its refresh margin should start a background refresh, not \(refresh)")
            return
        }
        // While the refresh runs the old token is still handed out, and no second refresh starts.
        #expect(cache.cached(key: Self.key, now: clock.nowMillis())?.token == t1)
        #expect(cache.refreshInBackground(key: Self.key, credential: "app", now: clock.nowMillis()) == .wait)
        #expect(plan() == (.none, PrefetchPlan.pollMillis))

        clock.advance(200)
        let t2 = Self.token("T2", issued: clock.nowMillis(), lifetime: 3_600_000)
        _ = cache.complete(ticket, with: .success(t2), now: clock.nowMillis())
        #expect(cache.cached(key: Self.key, now: clock.nowMillis())?.token.value == "T2")
        #expect(plan() == (.none, 3_300_000))
    }

    // MARK: - prefetch

    @Test func prefetchLooksAtEachRootWhenItsOwnTokenIsDue() {
        let clock = FakeClock(1_700_000_000_000)
        let now = clock.nowMillis()
        var cache = Cache()
        func key(_ name: String) -> String { "\(name)|https://\(name).example.com/arcgis" }
        func adopt(_ name: String, issued: Int64, lifetime: Int64?) {
            let t = IssuedToken(
                value: name, expires: lifetime.map { issued + $0 }, issued: issued, ssl: false, referer: nil)
            cache.adopt(key: key(name), credential: name, token: t)
        }
        adopt("a", issued: now, lifetime: 3_600_000)  // margin 5 min: due in 55 min
        adopt("b", issued: now - 1_000, lifetime: 600_000)  // margin 1 min (10 %): due in 8 min 59 s
        adopt("c", issued: now - 590_000, lifetime: 600_000)  // inside its margin already
        adopt("d", issued: now - 700_000, lifetime: 600_000)  // expired
        adopt("e", issued: now, lifetime: nil)  // never expires
        Self.fetch(&cache, key: key("f"), clock: FakeClock(now - 200), .failure(Self.down))  // backing off until +800
        // "g" was never asked for.

        func plan(_ name: String) -> (PrefetchPlan.Action, Int64?) {
            PrefetchPlan.next(key: key(name), in: cache, now: clock.nowMillis())
        }
        let poll = PrefetchPlan.pollMillis
        #expect(plan("a") == (.none, 3_300_000))
        #expect(plan("b") == (.none, 539_000))
        #expect(plan("c") == (.refresh, poll))
        #expect(plan("d") == (.fetch, poll))
        #expect(plan("e") == (.none, nil))
        #expect(plan("f") == (.none, 800))
        #expect(plan("g") == (.fetch, poll))

        // The earliest timer (f's) fires: f fetches, the others keep their own times.
        clock.advance(800)
        #expect(plan("f") == (.fetch, poll))
        #expect(plan("a") == (.none, 3_299_200))
        #expect(plan("b") == (.none, 538_200))
        // b's timer: b refreshes, a still waits.
        clock.advance(538_200)
        #expect(plan("b") == (.refresh, poll))
        #expect(plan("a") == (.none, 2_761_000))
    }

    // MARK: - the service reads its injected clock

    static func service(_ c: Credential, clock: FakeClock) -> TokenService {
        TokenService(
            credentials: [c], stateDir: "/nonexistent/authproxy-clock-tests", stateKey: nil, timeoutSeconds: 5,
            logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }), clock: clock)
    }

    static func target(_ url: String) throws -> URLTarget {
        guard case .absolute(let u) = try RequestHeadParser.parseTarget(method: "GET", url) else {
            throw TargetError()
        }
        return u
    }

    struct TargetError: Error {}

    static let gis = """
        [[credential]]
        name = "gis"
        type = "arcgis-token"
        username = "u"
        password = "p"
        token_url = "http://127.0.0.1:9/portal/sharing/rest/generateToken"
        match = ["http://127.0.0.1:9/arcgis"]
        """

    /// The probe budget of ``RootConfirmations`` is spent and refilled on the service's clock, which here runs a
    /// day ahead of the system's: on the system clock the budget would look spent for a day.
    @Test func theServiceMeasuresTheRootProbeBudgetOnItsClock() async throws {
        let clock = FakeClock(SystemWallClock().nowMillis() + 86_400_000)
        let c = try TokenTestSupport.credential(Self.gis)
        let service = Self.service(c, clock: clock)
        // Every probe of the budget is running (none settles: nothing goes out on the network).
        service.queue.sync {
            for i in 0..<service.confirmations.limits.probeBurst {
                let key = TokenService.key("gis", root: "http://127.0.0.1:9/arcgis/invented\(i)", isPortal: false)
                #expect(
                    service.confirmations.check(
                        credential: "gis", key: key, configured: false, now: clock.nowMillis(), waiter: { _ in })
                        == .probe)
            }
        }
        clock.advance(1_000)
        let target = try Self.target("http://127.0.0.1:9/arcgis/another/rest/services/A/MapServer")
        let result = await withCheckedContinuation { k in
            service.token(for: c, target: target) { k.resume(returning: $0) }
        }
        guard case .failure(let e) = result else {
            Issue.record("a root beyond the probe budget should get no token")
            return
        }
        // One probe comes back 6 s after the burst was spent, 5 s from now.
        #expect(e.details.first == "Another root may be checked in 5 s.", "\(e)")
    }

    /// A rejection of a fresh token starts the key's rejection backoff at the service's clock.
    @Test func theServiceStartsARejectionBackoffOnItsClock() throws {
        let clock = FakeClock(1_700_000_000_000)
        let c = try TokenTestSupport.credential(Self.gis)
        let service = Self.service(c, clock: clock)
        let target = try Self.target("http://127.0.0.1:9/arcgis/rest/services/A/MapServer")
        var fresh = Self.token("T", issued: clock.nowMillis(), lifetime: 3_600_000)
        fresh.fresh = true
        let action = service.rejected(c, target: target, token: fresh, attempt: 1, replayImpossible: nil)
        guard case .relay(_, serverRejectsNewTokens: true) = action else {
            Issue.record("a rejected fresh token should make the server count as rejecting new tokens: \(action)")
            return
        }
        #expect(service.rejectionBackoff(for: c, target: target)?.retryAt == clock.nowMillis() + TokenBackoff.base)
    }
}
