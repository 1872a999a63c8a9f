import Testing

@testable import AuthProxyCore

/// ``TokenCache`` driven step by step on a fake clock (the `now` each call takes, in milliseconds), with
/// requests as plain strings.
@Suite struct TokenCacheTests {
    typealias Cache = TokenCache<String>

    static let key = "app|https://gis.example.com/arcgis"
    static let portalKey = "app|https://gis.example.com/portal"

    static func token(_ value: String, issued: Int64 = 0, expires: Int64? = 100_000) -> IssuedToken {
        IssuedToken(value: value, expires: expires, issued: issued, ssl: false, referer: nil)
    }

    static func fresh(_ t: IssuedToken) -> IssuedToken {
        var t = t
        t.fresh = true
        return t
    }

    static let down = TokenError(credential: "app", message: "token service https://gis.example.com failed: timeout")

    /// Starts a token request for `key` at `now` and completes it with `result`; returns the ticket's settlement.
    @discardableResult
    static func fetch(_ cache: inout Cache, key: String = key, at now: Int64, _ result: Result<IssuedToken, TokenError>)
        -> Cache.Settlement
    {
        guard case .startFetch(let ticket) = cache.acquire(key: key, credential: "app", now: now, waiter: "setup")
        else {
            Issue.record("expected a token request to start")
            return Cache.Settlement(outcome: .discarded, deliveries: [])
        }
        return cache.complete(ticket, with: result, now: now)
    }

    /// T1 fetched at 0 and rejected at 50, then T2 fetched at 100 to replace it: returns T2.
    @discardableResult
    static func replaceRejectedToken(_ cache: inout Cache) -> IssuedToken {
        let t1 = token("T1", issued: 0, expires: 600_000)
        fetch(&cache, at: 0, .success(t1))
        let stale = cache.rejected(
            key: key, credential: "app", token: t1, attempt: 1, pregenerated: false,
            refreshable: true, replayImpossible: nil, now: 50)
        #expect(stale.action == .refreshAndRetry)
        let t2 = token("T2", issued: 100, expires: 600_000)
        fetch(&cache, at: 100, .success(t2))
        return t2
    }

    static func waiters(_ s: Cache.Settlement) -> [String] { s.deliveries.map(\.waiter) }
    static func tokens(_ s: Cache.Settlement) -> [IssuedToken?] { s.deliveries.map { try? $0.result.get() } }

    // MARK: - single flight

    @Test func threeRequestsShareOneTokenRequest() throws {
        var cache = Cache()
        let first = cache.acquire(key: Self.key, credential: "app", now: 0, waiter: "a")
        guard case .startFetch(let ticket) = first else {
            Issue.record("the first request must start a token request, got \(first)")
            return
        }
        let lookup1 = cache.acquire(key: Self.key, credential: "app", now: 10, waiter: "b")
        #expect(lookup1 == .wait)
        let lookup2 = cache.acquire(key: Self.key, credential: "app", now: 20, waiter: "c")
        #expect(lookup2 == .wait)
        #expect(cache.cached(key: Self.key, now: 20) == nil)

        let t = Self.token("T1", issued: 30)
        let settled = cache.complete(ticket, with: .success(t), now: 30)
        #expect(settled.outcome == .stored)
        #expect(Self.waiters(settled) == ["a", "b", "c"])
        // Every one of them waited for it: fresh (the upstream has never seen it).
        #expect(Self.tokens(settled) == [Self.fresh(t), Self.fresh(t), Self.fresh(t)])

        // Later requests get the cached token, not marked fresh.
        let lookup3 = cache.acquire(key: Self.key, credential: "app", now: 40, waiter: "d")
        #expect(lookup3 == .ready(t))
        #expect(cache.cached(key: Self.key, now: 40)?.token == t)
        // The same ticket reported twice changes nothing.
        let again = cache.complete(ticket, with: .success(Self.token("T2")), now: 50)
        #expect(again.outcome == .discarded && again.deliveries.isEmpty)
        #expect(cache.cached(key: Self.key, now: 50)?.token == t)
    }

    @Test func keysHaveTheirOwnFlights() {
        var cache = Cache()
        guard case .startFetch(let server) = cache.acquire(key: Self.key, credential: "app", now: 0, waiter: "a"),
            case .startFetch(let portal) = cache.acquire(key: Self.portalKey, credential: "app", now: 0, waiter: "b")
        else {
            Issue.record("each key starts its own token request")
            return
        }
        #expect(server != portal)
        #expect(Self.waiters(cache.complete(portal, with: .success(Self.token("P")), now: 1)) == ["b"])
        #expect(Self.waiters(cache.complete(server, with: .success(Self.token("S")), now: 1)) == ["a"])
    }

    // MARK: - refresh margin and expiry

    @Test func aTokenInItsRefreshMarginIsHandedOutWhileOneRefreshRuns() {
        var cache = Cache()
        // Lifetime 100 s: the margin is 10 s (10 % of the lifetime, under the 5 min cap).
        let t1 = Self.token("T1", issued: 0, expires: 100_000)
        Self.fetch(&cache, at: 0, .success(t1))

        #expect(
            cache.cached(key: Self.key, now: 89_999).map { [$0.token.value, "\($0.refreshDue)"] } == ["T1", "false"])
        let refresh4 = cache.refreshInBackground(key: Self.key, credential: "app", now: 89_999)
        #expect(refresh4 == .ready(t1))

        #expect(
            cache.cached(key: Self.key, now: 90_000).map { [$0.token.value, "\($0.refreshDue)"] } == ["T1", "true"])
        guard case .startFetch(let refresh) = cache.refreshInBackground(key: Self.key, credential: "app", now: 90_000)
        else {
            Issue.record("a token in its margin must be refreshed")
            return
        }
        // One refresh at a time; requests meanwhile still get the old token without waiting.
        let refresh5 = cache.refreshInBackground(key: Self.key, credential: "app", now: 90_500)
        #expect(refresh5 == .wait)
        let lookup6 = cache.acquire(key: Self.key, credential: "app", now: 91_000, waiter: "r")
        #expect(lookup6 == .ready(t1))

        let t2 = Self.token("T2", issued: 92_000, expires: 192_000)
        let settled = cache.complete(refresh, with: .success(t2), now: 92_000)
        #expect(settled.outcome == .stored && settled.deliveries.isEmpty)
        #expect(cache.cached(key: Self.key, now: 92_000)?.token == t2)
    }

    @Test func anExpiredTokenIsNotHandedOut() {
        var cache = Cache()
        Self.fetch(&cache, at: 0, .success(Self.token("T1", expires: 100_000)))
        #expect(cache.cached(key: Self.key, now: 99_999)?.token.value == "T1")
        #expect(cache.cached(key: Self.key, now: 100_000) == nil)
        guard case .startFetch = cache.acquire(key: Self.key, credential: "app", now: 100_000, waiter: "a") else {
            Issue.record("an expired token must be replaced")
            return
        }
    }

    @Test func aTokenWithoutExpiryIsNeverRefreshed() {
        var cache = Cache()
        Self.fetch(&cache, at: 0, .success(Self.token("T1", expires: nil)))
        #expect(
            cache.cached(key: Self.key, now: 10_000_000_000).map { "\($0.token.value) \($0.refreshDue)" } == "T1 false")
    }

    // MARK: - failure backoff and probe

    @Test func failuresBackOffAndOneProbeGoesOutWhenTheBackoffEnds() {
        var cache = Cache()
        let first = Self.fetch(&cache, at: 10_000, .failure(Self.down))
        #expect(first.outcome == .failed(retryIn: 1000))
        // The waiting request learns when the next attempt is.
        var told = Self.down
        told.retryAt = 11_000
        #expect(first.deliveries.map(\.result) == [.failure(told)])

        // Meanwhile requests are answered at once; the first asks for a probe at the end of the backoff.
        let lookup7 = cache.acquire(key: Self.key, credential: "app", now: 10_500, waiter: "b")
        #expect(lookup7 == .backingOff(told, probeAt: 11_000))
        let lookup8 = cache.acquire(key: Self.key, credential: "app", now: 10_600, waiter: "c")
        #expect(lookup8 == .backingOff(told, probeAt: nil))

        guard case .startFetch(let probe) = cache.probeDue(key: Self.key, now: 11_000) else {
            Issue.record("a request wanted a token during the backoff: the probe must go out")
            return
        }
        // Requests arriving while the probe runs wait for it.
        let lookup9 = cache.acquire(key: Self.key, credential: "app", now: 11_001, waiter: "d")
        #expect(lookup9 == .wait)
        let second = cache.complete(probe, with: .failure(Self.down), now: 11_500)
        #expect(second.outcome == .failed(retryIn: 2000))  // doubled
        told.retryAt = 13_500
        #expect(second.deliveries.map(\.waiter) == ["d"])
        #expect(second.deliveries.map(\.result) == [.failure(told)])
        let lookup10 = cache.acquire(key: Self.key, credential: "app", now: 12_000, waiter: "e")
        #expect(lookup10 == .backingOff(told, probeAt: 13_500))

        // Recovery resets the schedule.
        guard case .startFetch(let third) = cache.probeDue(key: Self.key, now: 13_500) else {
            Issue.record("expected the second probe")
            return
        }
        let settled11 = cache.complete(
            third, with: .success(Self.token("T1", issued: 13_600, expires: 200_000)), now: 13_600)
        #expect(settled11.outcome == .stored)
        let lookup12 = cache.acquire(key: Self.key, credential: "app", now: 14_000, waiter: "f")
        #expect(lookup12 == .ready(Self.token("T1", issued: 13_600, expires: 200_000)))
    }

    @Test func noProbeWhenNobodyWantedATokenMeanwhile() {
        var cache = Cache()
        Self.fetch(&cache, at: 0, .failure(Self.down))
        let probe13 = cache.probeDue(key: Self.key, now: 1000)
        #expect(probe13 == nil)
        let probe14 = cache.probeDue(key: "unknown|key", now: 1000)
        #expect(probe14 == nil)
    }

    @Test func aLocalFailureDoesNotBackOff() {
        var cache = Cache()
        var local = TokenError(credential: "app", message: "no refresh token yet")
        local.local = true
        let settled = Self.fetch(&cache, at: 0, .failure(local))
        #expect(settled.outcome == .failed(retryIn: 0))
        #expect(settled.deliveries.map(\.result) == [.failure(local)])  // no retryAt
        guard case .startFetch = cache.acquire(key: Self.key, credential: "app", now: 1, waiter: "b") else {
            Issue.record("a local failure must not hold the next request back")
            return
        }
    }

    @Test func aFailedRefreshKeepsTheTokenUntilItExpires() {
        var cache = Cache()
        let t1 = Self.token("T1", issued: 0, expires: 100_000)
        Self.fetch(&cache, at: 0, .success(t1))
        guard case .startFetch(let refresh) = cache.refreshInBackground(key: Self.key, credential: "app", now: 95_000)
        else {
            Issue.record("expected a refresh")
            return
        }
        let lookup15 = cache.acquire(key: Self.key, credential: "app", now: 96_000, waiter: "a")
        #expect(lookup15 == .ready(t1))
        let settled = cache.complete(refresh, with: .failure(Self.down), now: 96_000)
        #expect(settled.outcome == .failed(retryIn: 1000))
        #expect(cache.cached(key: Self.key, now: 96_000)?.token == t1)
        // While backing off, requests still get the token that is valid.
        let lookup16 = cache.acquire(key: Self.key, credential: "app", now: 96_500, waiter: "b")
        #expect(lookup16 == .ready(t1))
    }

    @Test func waitersOfAFailedRequestLearnWhenTheNextAttemptIs() {
        var cache = Cache()
        let t1 = Self.token("T1", issued: 0, expires: 100_000)
        Self.fetch(&cache, at: 0, .success(t1))
        guard case .startFetch(let refresh) = cache.refreshInBackground(key: Self.key, credential: "app", now: 95_000)
        else {
            Issue.record("expected a refresh")
            return
        }
        // The token is rejected upstream (forgotten) while its refresh runs; a request waits for the refresh.
        let forgot17 = cache.invalidate(credential: "app", value: "T1")
        #expect(forgot17)
        let lookup18 = cache.acquire(key: Self.key, credential: "app", now: 95_100, waiter: "a")
        #expect(lookup18 == .wait)
        let settled = cache.complete(refresh, with: .failure(Self.down), now: 95_200)
        var told = Self.down
        told.retryAt = 96_200
        #expect(settled.deliveries.map(\.result) == [.failure(told)])
    }

    // MARK: - rejections

    @Test func aFreshTokenRejectedBacksOffThenTheNextRequestRefreshes() {
        var cache = Cache()
        let t1 = Self.token("T1", issued: 0, expires: 600_000)
        let settled = Self.fetch(&cache, at: 0, .success(t1))
        let handedOut = try? settled.deliveries[0].result.get()
        #expect(handedOut?.fresh == true)

        // The server rejects the token this request waited for: relay, and back off.
        let first = cache.rejected(
            key: Self.key, credential: "app", token: Self.fresh(t1), attempt: 1, pregenerated: false,
            refreshable: true, replayImpossible: nil, now: 1000)
        #expect(first.action == .relay(reason: "the server rejects new tokens", serverRejectsNewTokens: true))
        #expect(first.backoffStarted == 1000 && first.consecutive == 1)
        // Other requests that shared the same fresh token count as the same failure.
        let shared = cache.rejected(
            key: Self.key, credential: "app", token: Self.fresh(t1), attempt: 1, pregenerated: false,
            refreshable: true, replayImpossible: nil, now: 1100)
        #expect(shared.backoffStarted == nil && shared.consecutive == 1)
        #expect(cache.rejectionBackoff(key: Self.key)?.retryAt == 2000)

        // While backing off: the rejected token keeps going out (clients get the server's own answer), a
        // rejection of it is relayed without a refresh, and no token request starts.
        let lookup19 = cache.acquire(key: Self.key, credential: "app", now: 1500, waiter: "b")
        #expect(lookup19 == .ready(t1))
        let during = cache.rejected(
            key: Self.key, credential: "app", token: t1, attempt: 1, pregenerated: false,
            refreshable: true, replayImpossible: nil, now: 1500)
        #expect(
            during.action
                == .relay(reason: "the server rejected new tokens recently; backing off", serverRejectsNewTokens: false)
        )
        #expect(cache.cached(key: Self.key, now: 1500)?.token == t1)

        // After the backoff, the next rejection refreshes: the token is forgotten and a request starts.
        let after = cache.rejected(
            key: Self.key, credential: "app", token: t1, attempt: 1, pregenerated: false,
            refreshable: true, replayImpossible: nil, now: 2000)
        #expect(after.action == .refreshAndRetry && after.backoffStarted == nil)
        #expect(cache.cached(key: Self.key, now: 2000) == nil)
        guard case .startFetch(let probe) = cache.acquire(key: Self.key, credential: "app", now: 2000, waiter: "c")
        else {
            Issue.record("after the backoff a new token must be requested")
            return
        }
        // A second fresh token rejected as well: the backoff doubles.
        let t2 = Self.token("T2", issued: 2100, expires: 600_000)
        _ = cache.complete(probe, with: .success(t2), now: 2100)
        let again = cache.rejected(
            key: Self.key, credential: "app", token: Self.fresh(t2), attempt: 1, pregenerated: false,
            refreshable: true, replayImpossible: nil, now: 2200)
        #expect(again.backoffStarted == 2000 && again.consecutive == 2)
    }

    @Test func withoutATokenToHandOutABackingOffKeySaysUntilWhen() {
        var cache = Cache()
        let t1 = Self.token("T1", issued: 0, expires: 1500)
        Self.fetch(&cache, at: 0, .success(t1))
        _ = cache.rejected(
            key: Self.key, credential: "app", token: Self.fresh(t1), attempt: 1, pregenerated: false,
            refreshable: true, replayImpossible: nil, now: 1000)
        let lookup20 = cache.acquire(key: Self.key, credential: "app", now: 1600, waiter: "a")
        #expect(lookup20 == .rejectingNewTokens(retryAt: 2000))
        guard case .startFetch = cache.acquire(key: Self.key, credential: "app", now: 2000, waiter: "a") else {
            Issue.record("the backoff is over")
            return
        }
    }

    @Test func rejectionsThatDoNotMeanBackoffForgetTheToken() {
        func reject(pregenerated: Bool, refreshable: Bool, replayImpossible: String?) -> (Cache.RejectionOutcome, Cache)
        {
            var cache = Cache()
            let t1 = Self.token("T1")
            Self.fetch(&cache, at: 0, .success(t1))
            let outcome = cache.rejected(
                key: Self.key, credential: "app", token: t1, attempt: 1,
                pregenerated: pregenerated, refreshable: refreshable, replayImpossible: replayImpossible, now: 10)
            return (outcome, cache)
        }
        let (pregenerated, c1) = reject(pregenerated: true, refreshable: false, replayImpossible: nil)
        #expect(pregenerated == Cache.RejectionOutcome(action: .explainPregenerated))
        #expect(c1.cached(key: Self.key, now: 10) == nil)
        let (streamed, c2) = reject(pregenerated: false, refreshable: true, replayImpossible: "the body was streamed")
        #expect(
            streamed
                == Cache.RejectionOutcome(
                    action: .relay(reason: "the body was streamed", serverRejectsNewTokens: false)))
        #expect(c2.cached(key: Self.key, now: 10) == nil)
        #expect(c2.rejectionBackoff(key: Self.key) == nil)
    }

    // MARK: - invalidation

    @Test func invalidateForgetsOnlyTheCurrentValue() {
        var cache = Cache()
        let t1 = Self.token("T1")
        Self.fetch(&cache, at: 0, .success(t1))
        // Another request's refresh replaced T0 already: its late rejection leaves T1 alone.
        let forgot21 = cache.invalidate(credential: "app", value: "T0")
        #expect(!forgot21)
        #expect(cache.cached(key: Self.key, now: 1)?.token == t1)
        // The same value under another credential is not this credential's token.
        let forgot22 = cache.invalidate(credential: "other", value: "T1")
        #expect(!forgot22)
        #expect(cache.cached(key: Self.key, now: 1)?.token == t1)
        let forgot23 = cache.invalidate(credential: "app", value: "T1")
        #expect(forgot23)
        #expect(cache.cached(key: Self.key, now: 1) == nil)
    }

    @Test func aCachedTokenJustFetchedToReplaceARejectedOneCountsAsFresh() {
        var cache = Cache()
        let t2 = Self.replaceRejectedToken(&cache)
        // A new request took T2 from the cache (not marked fresh) and the server rejected it at once: the server
        // rejects new tokens; no third token request.
        let soon = cache.rejected(
            key: Self.key, credential: "app", token: t2, attempt: 1, pregenerated: false,
            refreshable: true, replayImpossible: nil, now: 150)
        #expect(soon.action == .relay(reason: "the server rejects new tokens", serverRejectsNewTokens: true))
        #expect(cache.cached(key: Self.key, now: 150)?.token == t2)
    }

    @Test func aReplacementTokenRejectedLongAfterItWasFetchedIsRefreshed() {
        var cache = Cache()
        let t2 = Self.replaceRejectedToken(&cache)
        // T2 served for a while, then the server revoked it: an ordinary stale token.
        let later = cache.rejected(
            key: Self.key, credential: "app", token: t2, attempt: 1, pregenerated: false,
            refreshable: true, replayImpossible: nil, now: 100 + Cache.freshAfterRejectionMillis)
        #expect(later.action == .refreshAndRetry)
    }

    @Test func aReplacementTokenTheServerAcceptedIsRefreshedWhenRejectedSoonAfter() {
        // Tokens expired twice within seconds (an admin invalidating them, a server restart): the second
        // rejection is of a token the server had accepted, so it is refreshed and retried, not relayed.
        var cache = Cache()
        #expect(!cache.awaitsAcceptance)
        let t2 = Self.replaceRejectedToken(&cache)
        #expect(cache.awaitsAcceptance)
        // A late answer to T1 proves nothing about T2.
        cache.accepted(key: Self.key, value: "T1", now: 120)
        let unproven = cache.rejected(
            key: Self.key, credential: "app", token: t2, attempt: 1, pregenerated: false,
            refreshable: true, replayImpossible: nil, now: 150)
        #expect(unproven.action == .relay(reason: "the server rejects new tokens", serverRejectsNewTokens: true))

        var again = Cache()
        Self.replaceRejectedToken(&again)
        again.accepted(key: Self.key, value: "T2", now: 1_050)
        let proven = again.rejected(
            key: Self.key, credential: "app", token: t2, attempt: 1, pregenerated: false,
            refreshable: true, replayImpossible: nil, now: 1_100)
        #expect(proven.action == .refreshAndRetry)
        #expect(!again.awaitsAcceptance)
        #expect(proven.backoffStarted == nil)
        #expect(again.cached(key: Self.key, now: 1_100) == nil)
    }

    @Test func anAcceptedTokenEndsTheRejectionBackoff() {
        var cache = Cache()
        let t1 = Self.token("T1", issued: 0, expires: 600_000)
        Self.fetch(&cache, at: 0, .success(t1))
        // A fresh token rejected: the key backs off and keeps relaying with T1.
        let first = cache.rejected(
            key: Self.key, credential: "app", token: Self.fresh(t1), attempt: 1, pregenerated: false,
            refreshable: true, replayImpossible: nil, now: 10)
        #expect(first.backoffStarted != nil)
        #expect(cache.rejectionBackoff(key: Self.key)?.isBackingOff(at: 20) == true)
        // An unrelated token's answer changes nothing.
        cache.accepted(key: Self.key, value: "T0", now: 20)
        #expect(cache.rejectionBackoff(key: Self.key) != nil)
        // The server accepts T1 after all (a transient refusal): the backoff is over.
        cache.accepted(key: Self.key, value: "T1", now: 25)
        #expect(cache.rejectionBackoff(key: Self.key)?.isBackingOff(at: 30) == false)
        #expect(cache.cached(key: Self.key, now: 30)?.token == t1)
        // Its failure is remembered for a while, then forgotten.
        cache.accepted(key: Self.key, value: "T1", now: 100 + TokenBackoff.forgetAfter)
        #expect(cache.rejectionBackoff(key: Self.key) == nil)
        #expect(!cache.awaitsAcceptance)
    }

    @Test func aServiceThatRejectsTokensAcceptedElsewhereDoesNotFetchOnePerRequest() {
        // Service X rejects every token (a denial that looks like a token error); service Y of the same root
        // accepts them. Each X request refreshed and retried, Y's next answer ended the backoff, and the next X
        // request fetched again: a password login per request. After the second fresh token rejected in a row,
        // an acceptance no longer ends the backoff: X's rejections are relayed and Y keeps its token.
        var cache = Cache()
        let t1 = Self.token("T1", issued: 0, expires: 600_000)
        Self.fetch(&cache, at: 0, .success(t1))
        cache.accepted(key: Self.key, value: "T1", now: 5)
        var fetches = 0
        var current = t1
        var now: Int64 = 10
        for round in 0..<6 {
            // X with the current (accepted) token.
            let first = cache.rejected(
                key: Self.key, credential: "app", token: current, attempt: 1, pregenerated: false,
                refreshable: true, replayImpossible: nil, now: now)
            if first.action == .refreshAndRetry {
                fetches += 1
                let next = Self.token("T\(round + 2)", issued: now, expires: now + 600_000)
                Self.fetch(&cache, at: now, .success(next))
                let retry = cache.rejected(
                    key: Self.key, credential: "app", token: Self.fresh(next), attempt: 2, pregenerated: false,
                    refreshable: true, replayImpossible: nil, now: now + 5)
                #expect(retry.action == .relay(reason: "the server rejects new tokens", serverRejectsNewTokens: true))
                current = next
            } else {
                #expect(
                    first.action
                        == .relay(
                            reason: "the server rejected new tokens recently; backing off",
                            serverRejectsNewTokens: false))
            }
            // Y accepts the token in force, which keeps being handed out.
            #expect(cache.acquire(key: Self.key, credential: "app", now: now + 10, waiter: "y") == .ready(current))
            cache.accepted(key: Self.key, value: current.value, now: now + 10)
            now += 200
        }
        // Six X requests within 1.2 s: two fetches (the second one shows the pattern), not six.
        #expect(fetches == 2)
        #expect(cache.rejectionBackoff(key: Self.key)?.isBackingOff(at: now) == true)
    }

    @Test func aRejectionOfAnOldTokenKeepsTheRefreshedOne() {
        var cache = Cache()
        let t1 = Self.token("T1", issued: 0, expires: 100_000)
        Self.fetch(&cache, at: 0, .success(t1))
        guard case .startFetch(let refresh) = cache.refreshInBackground(key: Self.key, credential: "app", now: 95_000)
        else {
            Issue.record("expected a refresh")
            return
        }
        let t2 = Self.token("T2", issued: 95_100, expires: 300_000)
        _ = cache.complete(refresh, with: .success(t2), now: 95_100)
        // A request still carrying T1 is rejected: refresh and retry, but T2 stays.
        let outcome = cache.rejected(
            key: Self.key, credential: "app", token: t1, attempt: 1, pregenerated: false,
            refreshable: true, replayImpossible: nil, now: 95_200)
        #expect(outcome.action == .refreshAndRetry)
        let lookup24 = cache.acquire(key: Self.key, credential: "app", now: 95_200, waiter: "retry")
        #expect(lookup24 == .ready(t2))
    }

    @Test func aPortalTokenUsedAsIsIsForgottenUnderEveryKey() {
        var cache = Cache()
        let p = Self.token("P")
        Self.fetch(&cache, key: Self.portalKey, at: 0, .success(p))
        Self.fetch(&cache, key: Self.key, at: 0, .success(p))  // a non-federated server: the portal token as is
        let forgot25 = cache.invalidate(credential: "app", value: "P")
        #expect(forgot25)
        #expect(cache.cached(key: Self.portalKey, now: 1) == nil)
        #expect(cache.cached(key: Self.key, now: 1) == nil)
    }

    // MARK: - generations

    @Test func aLateResultFromBeforeASignInChangeIsNotCached() {
        var cache = Cache()
        guard case .startFetch(let old) = cache.acquire(key: Self.key, credential: "app", now: 0, waiter: "a") else {
            Issue.record("expected a token request")
            return
        }
        // The user signs out (or in as someone else) while the request runs.
        cache.grantChanged(credential: "app")
        // A new request does not join the old grant's request: it starts its own.
        guard case .startFetch(let new) = cache.acquire(key: Self.key, credential: "app", now: 10, waiter: "b") else {
            Issue.record("a request after the change must not wait for the old grant's token")
            return
        }
        #expect(new != old)

        // The old request ends: its waiter gets its answer, but nothing is cached.
        let oldToken = Self.token("OLD")
        let late = cache.complete(old, with: .success(oldToken), now: 20)
        #expect(late.outcome == .discarded)
        #expect(Self.waiters(late) == ["a"])
        #expect(Self.tokens(late) == [Self.fresh(oldToken)])
        #expect(cache.cached(key: Self.key, now: 20) == nil)
        // And it did not end the new request.
        let lookup26 = cache.acquire(key: Self.key, credential: "app", now: 25, waiter: "c")
        #expect(lookup26 == .wait)

        let newToken = Self.token("NEW")
        let settled = cache.complete(new, with: .success(newToken), now: 30)
        #expect(settled.outcome == .stored)
        #expect(Self.waiters(settled) == ["b", "c"])
        #expect(cache.cached(key: Self.key, now: 30)?.token == newToken)
    }

    @Test func aSignInChangeDropsTheTokensAndAnOldFailureCountsForNothing() {
        var cache = Cache()
        Self.fetch(&cache, at: 0, .success(Self.token("T1", issued: 0, expires: 100_000)))
        Self.fetch(&cache, key: Self.portalKey, at: 0, .success(Self.token("P1")))
        guard case .startFetch(let refresh) = cache.refreshInBackground(key: Self.key, credential: "app", now: 95_000)
        else {
            Issue.record("expected a refresh")
            return
        }
        cache.grantChanged(credential: "app")
        #expect(cache.cached(key: Self.key, now: 95_000) == nil)
        #expect(cache.cached(key: Self.portalKey, now: 95_000) == nil)
        let late = cache.complete(refresh, with: .failure(Self.down), now: 95_100)
        #expect(late.outcome == .discarded && late.deliveries.isEmpty)
        // No backoff from the old grant's failure.
        guard case .startFetch = cache.acquire(key: Self.key, credential: "app", now: 95_200, waiter: "a") else {
            Issue.record("the old grant's failure must not hold the new one back")
            return
        }
    }

    // MARK: - the state file

    @Test func savedTokensAreAdoptedOnlyForKeysNeverUsed() {
        var cache = Cache()
        let saved = Self.token("SAVED", expires: 500_000)
        let adopted27 = cache.adopt(key: Self.portalKey, credential: "app", token: saved)
        #expect(adopted27)
        let lookup28 = cache.acquire(key: Self.portalKey, credential: "app", now: 1, waiter: "a")
        #expect(lookup28 == .ready(saved))

        // A key this process used (its token since dropped) does not take an old token back.
        Self.fetch(&cache, at: 0, .success(Self.token("T1")))
        cache.invalidate(credential: "app", value: "T1")
        let adopted29 = cache.adopt(key: Self.key, credential: "app", token: Self.token("T1"))
        #expect(!adopted29)
        #expect(cache.cached(key: Self.key, now: 1) == nil)

        let valid = cache.validTokens(now: 200_000).sorted { $0.key < $1.key }
        #expect(valid == [Cache.CachedToken(key: Self.portalKey, credential: "app", token: saved)])
        #expect(cache.validTokens(now: 500_000).isEmpty)
    }

    @Test func aSavedTokenNoHeadCouldCarryIsNotAdopted() {
        var cache = Cache()
        let smuggled = Self.token("tok\r\nX-Injected: 1", expires: 500_000)
        let adopted = cache.adopt(key: Self.portalKey, credential: "app", token: smuggled)
        #expect(!adopted)
        #expect(cache.cached(key: Self.portalKey, now: 1) == nil)
    }
}

/// A configuration reload that changes or removes a credential (``TokenCache/forget(credential:)``).
@Suite struct TokenCacheForgetTests {
    typealias Cache = TokenCache<String>
    static let key = TokenCacheTests.key
    static let other = "keep|https://gis.example.com/arcgis"

    @Test func forgettingDropsTokensAndBackoffsOfThatCredentialOnly() {
        var cache = Cache()
        TokenCacheTests.fetch(&cache, at: 0, .success(TokenCacheTests.token("T1")))
        guard case .startFetch(let t) = cache.acquire(key: Self.other, credential: "keep", now: 0, waiter: "k") else {
            Issue.record("expected a token request")
            return
        }
        _ = cache.complete(t, with: .success(TokenCacheTests.token("KEEP")), now: 0)
        #expect(cache.holds(credential: "app"))
        cache.forget(credential: "app")
        #expect(!cache.holds(credential: "app"))
        #expect(cache.cached(key: Self.key, now: 10) == nil)
        #expect(cache.cached(key: Self.other, now: 10)?.token.value == "KEEP")
    }

    @Test func aTokenRequestRunningWhenForgottenIsNotKept() {
        var cache = Cache()
        guard case .startFetch(let old) = cache.acquire(key: Self.key, credential: "app", now: 0, waiter: "a") else {
            Issue.record("expected a token request")
            return
        }
        cache.forget(credential: "app")
        // Under the new settings a request starts its own token request, with a ticket of its own.
        guard case .startFetch(let new) = cache.acquire(key: Self.key, credential: "app", now: 5, waiter: "b") else {
            Issue.record("a request after the reload must not wait for the old settings' token")
            return
        }
        #expect(new != old)
        // The new one finishes first; then the old one: its waiter gets its token, nothing is cached.
        let settled = cache.complete(new, with: .success(TokenCacheTests.token("NEW")), now: 10)
        #expect(settled.outcome == .stored)
        #expect(TokenCacheTests.waiters(settled) == ["b"])
        let late = cache.complete(old, with: .success(TokenCacheTests.token("OLD")), now: 20)
        #expect(late.outcome == .discarded)
        #expect(TokenCacheTests.waiters(late) == ["a"])
        #expect(cache.cached(key: Self.key, now: 20)?.token.value == "NEW")
    }

    @Test func aRemovedCredentialsTokenIsNotSavedOrAdoptedAgain() {
        var cache = Cache()
        TokenCacheTests.fetch(&cache, at: 0, .success(TokenCacheTests.token("T1")))
        cache.forget(credential: "app")
        #expect(cache.validTokens(now: 10).isEmpty)
        // The rejection backoff goes too.
        TokenCacheTests.fetch(&cache, at: 20, .success(TokenCacheTests.token("T2")))
        var fresh = TokenCacheTests.token("T2")
        fresh.fresh = true
        _ = cache.rejected(
            key: Self.key, credential: "app", token: fresh, attempt: 1, pregenerated: false,
            refreshable: true, replayImpossible: nil, now: 30)
        #expect(cache.rejectionBackoff(key: Self.key) != nil)
        cache.forget(credential: "app")
        #expect(cache.rejectionBackoff(key: Self.key) == nil)
    }
}
