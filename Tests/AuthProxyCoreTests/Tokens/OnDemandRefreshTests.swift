import Testing

@testable import AuthProxyCore

/// `refresh = "on_demand"`: the token decisions that keep an idle proxy from asking a token service anything, on a
/// ``FakeClock``, beside the same steps under the default (`"ahead"`), and how the configuration sets the mode.
@Suite struct OnDemandRefreshTests {
    typealias Cache = TokenCache<String>

    static let key = "app|https://gis.example.com/arcgis"
    static let down = TokenError(credential: "app", message: "token service https://gis.example.com failed: timeout")

    static func token(_ value: String, issued: Int64, lifetime: Int64) -> IssuedToken {
        IssuedToken(value: value, expires: issued + lifetime, issued: issued, ssl: false, referer: nil)
    }

    /// The token T1 (one hour, margin 5 min) fetched at the clock's time.
    static func cacheHoldingT1(_ clock: FakeClock) -> (Cache, IssuedToken) {
        var cache = Cache()
        let t1 = token("T1", issued: clock.nowMillis(), lifetime: 3_600_000)
        guard
            case .startFetch(let ticket) = cache.acquire(
                key: key, credential: "app", now: clock.nowMillis(), waiter: "s")
        else {
            Issue.record("expected a token request to start")
            return (cache, t1)
        }
        _ = cache.complete(ticket, with: .success(t1), now: clock.nowMillis())
        return (cache, t1)
    }

    @Test func outsideItsMarginTheTokenIsHandedOutInBothModes() {
        let clock = FakeClock(1_700_000_000_000)
        var (cache, t1) = Self.cacheHoldingT1(clock)
        clock.advance(3_600_000 - 300_001)
        for mode in RefreshMode.allCases {
            #expect(cache.cached(key: Self.key, now: clock.nowMillis(), mode: mode)?.token == t1)
            #expect(
                cache.acquire(key: Self.key, credential: "app", now: clock.nowMillis(), mode: mode, waiter: "r")
                    == .ready(t1))
        }
    }

    @Test func insideItsMarginAheadHandsTheTokenOutAndOnDemandWaitsForOneNewToken() {
        let clock = FakeClock(1_700_000_000_000)
        var (cache, t1) = Self.cacheHoldingT1(clock)
        clock.advance(3_600_000 - 300_000)  // the margin begins
        let now = clock.nowMillis()
        // ahead: the request gets T1 now and the service starts a background refresh.
        let ahead = cache.cached(key: Self.key, now: now, mode: .ahead)
        #expect(ahead?.token == t1)
        #expect(ahead?.refreshDue == true)
        // on_demand: nothing is handed out without waiting, so nothing runs after the request is answered.
        #expect(cache.cached(key: Self.key, now: now, mode: .onDemand) == nil)
        let first = cache.acquire(key: Self.key, credential: "app", now: now, mode: .onDemand, waiter: "a")
        guard case .startFetch(let ticket) = first else {
            Issue.record("on demand, a token in its margin is replaced for the request that needs it: \(first)")
            return
        }
        // Single flight: a second request meanwhile waits for the same token request.
        #expect(cache.acquire(key: Self.key, credential: "app", now: now, mode: .onDemand, waiter: "b") == .wait)
        clock.advance(150)
        let t2 = Self.token("T2", issued: clock.nowMillis(), lifetime: 3_600_000)
        let settled = cache.complete(ticket, with: .success(t2), now: clock.nowMillis())
        #expect(settled.deliveries.map(\.waiter) == ["a", "b"])
        #expect(cache.cached(key: Self.key, now: clock.nowMillis(), mode: .onDemand)?.token.value == "T2")
    }

    @Test func aFailedOnDemandRefreshKeepsServingTheStillValidTokenAndSchedulesNoProbe() {
        let clock = FakeClock(1_700_000_000_000)
        var (cache, t1) = Self.cacheHoldingT1(clock)
        clock.advance(3_600_000 - 200_000)
        let first = cache.acquire(
            key: Self.key, credential: "app", now: clock.nowMillis(), mode: .onDemand, waiter: "a")
        guard case .startFetch(let ticket) = first else {
            Issue.record("expected the on-demand refresh to start: \(first)")
            return
        }
        let settled = cache.complete(ticket, with: .failure(Self.down), now: clock.nowMillis())
        // The request that waited gets the token still valid.
        #expect(settled.deliveries.map { try? $0.result.get() } == [t1])
        // During the backoff the valid token serves without another token request.
        clock.advance(300)
        #expect(
            cache.acquire(key: Self.key, credential: "app", now: clock.nowMillis(), mode: .onDemand, waiter: "b")
                == .ready(t1))
        // After the backoff the next request asks again (a request, not a timer).
        clock.advance(1_000)
        guard
            case .startFetch = cache.acquire(
                key: Self.key, credential: "app", now: clock.nowMillis(), mode: .onDemand, waiter: "c")
        else {
            Issue.record("after the backoff, the next request should ask the token service again")
            return
        }
    }

    @Test func aBackoffWithoutATokenSchedulesAProbeOnlyAhead() {
        for mode in RefreshMode.allCases {
            let clock = FakeClock(1_700_000_000_000)
            var cache = Cache()
            guard
                case .startFetch(let ticket) = cache.acquire(
                    key: Self.key, credential: "app", now: clock.nowMillis(), mode: mode, waiter: "s")
            else {
                Issue.record("expected a token request to start")
                continue
            }
            _ = cache.complete(ticket, with: .failure(Self.down), now: clock.nowMillis())
            clock.advance(200)
            let wanted = cache.acquire(
                key: Self.key, credential: "app", now: clock.nowMillis(), mode: mode, waiter: "a")
            guard case .backingOff(let error, _) = wanted else {
                Issue.record("a request during the backoff gets the error at once: \(wanted)")
                continue
            }
            #expect(error.retryAt == 1_700_000_001_000)
            let probe = ProbeSchedule.delay(for: wanted, now: clock.nowMillis())
            #expect(probe == (mode == .ahead ? 800 : nil), "\(mode)")
            // And the end of the backoff finds no probe to run on demand (nobody asked for one).
            clock.advance(800)
            let due = cache.probeDue(key: Self.key, now: clock.nowMillis())
            if mode == .onDemand {
                #expect(due == nil)
            } else if case .startFetch = due {
            } else {
                Issue.record(
                    "ahead, the probe at the end of the backoff starts a token request: \(String(describing: due))")
            }
        }
    }

    @Test func anExpiredTokenCostsOneRequestInBothModes() {
        let clock = FakeClock(1_700_000_000_000)
        var (cache, _) = Self.cacheHoldingT1(clock)
        clock.advance(3 * 3_600_000)
        for mode in RefreshMode.allCases {
            #expect(cache.cached(key: Self.key, now: clock.nowMillis(), mode: mode) == nil)
        }
        guard
            case .startFetch = cache.acquire(
                key: Self.key, credential: "app", now: clock.nowMillis(), mode: .onDemand, waiter: "a")
        else {
            Issue.record("an expired token is fetched for the request")
            return
        }
        #expect(
            cache.acquire(key: Self.key, credential: "app", now: clock.nowMillis(), mode: .onDemand, waiter: "b")
                == .wait)
    }

    // MARK: - configuration

    static let base = "[proxy]\nlisten = [\"127.0.0.1:3128\"]\n"
    static let arcgis = """
        [[credential]]
        name = "gis"
        type = "arcgis-token"
        username = "u"
        password = "p"
        match = ["https://gis.example.com/arcgis"]

        """

    static func load(_ proxyExtra: String, _ credentials: String) throws(ConfigError) -> ProxyConfig {
        try ConfigLoader(environment: [:]).parse(Self.base + proxyExtra + "\n" + credentials)
    }

    @Test func theDefaultIsAheadAndProxyRefreshSetsItForCredentialsThatFetchTokens() throws {
        #expect(try Self.load("", Self.arcgis).credentials[0].refresh == .ahead)
        let key = """
            [[credential]]
            name = "key"
            type = "api-key"
            key = "k"
            match = ["https://api.example.com"]
            """
        let c = try Self.load("refresh = \"on_demand\"", Self.arcgis + key)
        #expect(c.refresh == .onDemand)
        #expect(c.credentials[0].refresh == .onDemand)
        #expect(c.credentials[1].refresh == .ahead)  // an API key fetches nothing
        // A credential's own setting wins over the default.
        let own = Self.arcgis.replacingOccurrences(of: "match =", with: "refresh = \"ahead\"\nmatch =")
        #expect(try Self.load("refresh = \"on_demand\"", own).credentials[0].refresh == .ahead)
    }

    @Test func prefetchWithOnDemandAndRefreshOnAKeyAreRefused() throws {
        let prefetching = Self.arcgis.replacingOccurrences(of: "match =", with: "prefetch = true\nmatch =")
        #expect(throws: ConfigError.self) { try Self.load("refresh = \"on_demand\"", prefetching) }
        do {
            _ = try Self.load("refresh = \"on_demand\"", prefetching)
        } catch {
            #expect(error.key == "credential[0].prefetch")
            #expect(error.message.contains("refresh = \"ahead\""))
        }
        let both = prefetching.replacingOccurrences(of: "match =", with: "refresh = \"on_demand\"\nmatch =")
        do {
            _ = try Self.load("", both)
            Issue.record("prefetch = true with refresh = \"on_demand\" must be refused")
        } catch {
            #expect(error.key == "credential[0].refresh")
        }
        // prefetch with an explicit ahead under an on_demand default is fine.
        let ahead = prefetching.replacingOccurrences(of: "match =", with: "refresh = \"ahead\"\nmatch =")
        #expect(try Self.load("refresh = \"on_demand\"", ahead).credentials[0].prefetch)
        let key = """
            [[credential]]
            name = "key"
            type = "api-key"
            key = "k"
            refresh = "on_demand"
            match = ["https://api.example.com"]
            """
        #expect(throws: ConfigError.self) { try Self.load("", key) }
        #expect(throws: ConfigError.self) { try Self.load("refresh = \"lazy\"", Self.arcgis) }
    }

    @Test func changingRefreshKeepsTheTokensAndRetunesTheCredential() throws {
        let ahead = try Self.load("", Self.arcgis)
        let onDemand = try Self.load("refresh = \"on_demand\"", Self.arcgis)
        let diff = ConfigDiff(running: ahead, loaded: onDemand)
        #expect(diff.kept == ["gis"])
        #expect(diff.retuned == ["gis"])
        #expect(diff.changed.isEmpty)
    }
}
