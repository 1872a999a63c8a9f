import Testing

@testable import AuthProxyCore

/// A refused password or client secret backs off the whole credential, not one root (50 roots
/// made 50 failed logins and locked the account).
@Suite struct TokenCacheLoginRefusalTests {
    typealias Cache = TokenCache<String>

    static func key(_ i: Int) -> String { "gis|https://gis.example.com/arcgis\(i)" }

    static let refused: TokenError = {
        var e = TokenError(credential: "gis", message: "token service refused: Unable to generate token.")
        e.refused = true
        e.loginRefused = true
        return e
    }()

    static let token = IssuedToken(value: "T", expires: 10_000_000, issued: 0, ssl: false, referer: nil)

    static func refuse(_ cache: inout Cache, key: String, at now: Int64) {
        guard case .startFetch(let t) = cache.acquire(key: key, credential: "gis", now: now, waiter: "first") else {
            Issue.record("expected a login")
            return
        }
        _ = cache.complete(t, with: .failure(refused), now: now)
    }

    @Test func otherRootsMakeNoLoginWhileTheCredentialBacksOff() {
        var cache = Cache()
        Self.refuse(&cache, key: Self.key(0), at: 0)
        var probes = 0
        for i in 1...50 {
            guard
                case .backingOff(let e, let probeAt) = cache.acquire(
                    key: Self.key(i), credential: "gis", now: 10, waiter: "r")
            else {
                Issue.record("root \(i) started a login while the credential backs off")
                continue
            }
            #expect(e.message == Self.refused.message && e.retryAt == TokenBackoff.base)
            if probeAt != nil { probes += 1 }
        }
        // One probe for the credential at the end of the backoff, not one per root.
        #expect(probes == 1)
        // Another credential is not affected.
        if case .startFetch = cache.acquire(
            key: "other|https://gis.example.com/arcgis", credential: "other", now: 10, waiter: "o")
        {
        } else {
            Issue.record("another credential was held back")
        }
    }

    @Test func afterTheBackoffOneLoginAtATime() {
        var cache = Cache()
        Self.refuse(&cache, key: Self.key(0), at: 0)
        // Backoff over: one root logs in; the others wait for its outcome with the last refusal.
        guard case .startFetch(let t) = cache.acquire(key: Self.key(1), credential: "gis", now: 2_000, waiter: "a")
        else {
            Issue.record("expected a login after the backoff")
            return
        }
        guard case .backingOff(_, nil) = cache.acquire(key: Self.key(2), credential: "gis", now: 2_001, waiter: "b")
        else {
            Issue.record("a second login ran alongside")
            return
        }
        // Refused again: the credential's backoff doubles (2 s), whichever root asked.
        _ = cache.complete(t, with: .failure(Self.refused), now: 2_010)
        guard case .backingOff(let e, _) = cache.acquire(key: Self.key(3), credential: "gis", now: 2_020, waiter: "c")
        else {
            Issue.record("expected the backoff")
            return
        }
        #expect(e.retryAt == 2_010 + 2 * TokenBackoff.base)
    }

    @Test func oneRefusalSharedByTwoRootsCountsOnce() {
        var cache = Cache()
        guard case .startFetch(let a) = cache.acquire(key: Self.key(0), credential: "gis", now: 0, waiter: "a"),
            case .startFetch(let b) = cache.acquire(key: Self.key(1), credential: "gis", now: 0, waiter: "b")
        else {
            Issue.record("expected two flights")
            return
        }
        // (A portal's refused login reaches both the portal key and the federated server's key.)
        _ = cache.complete(a, with: .failure(Self.refused), now: 5)
        _ = cache.complete(b, with: .failure(Self.refused), now: 6)
        guard case .backingOff(let e, _) = cache.acquire(key: Self.key(2), credential: "gis", now: 7, waiter: "c")
        else {
            Issue.record("expected the backoff")
            return
        }
        #expect(e.retryAt == 5 + TokenBackoff.base)
    }

    @Test func anOutageIsStillPerRoot() {
        var cache = Cache()
        guard case .startFetch(let t) = cache.acquire(key: Self.key(0), credential: "gis", now: 0, waiter: "a") else {
            Issue.record("expected a token request")
            return
        }
        _ = cache.complete(t, with: .failure(TokenError(credential: "gis", message: "token service down")), now: 0)
        if case .startFetch = cache.acquire(key: Self.key(1), credential: "gis", now: 1, waiter: "b") {
        } else {
            Issue.record("an outage of one root held back another")
        }
    }

    @Test func aTokenObtainedEndsTheCredentialBackoff() {
        var cache = Cache()
        Self.refuse(&cache, key: Self.key(0), at: 0)
        guard case .startFetch(let t) = cache.acquire(key: Self.key(0), credential: "gis", now: 1_500, waiter: "a")
        else {
            Issue.record("expected a login after the backoff")
            return
        }
        _ = cache.complete(t, with: .success(Self.token), now: 1_600)
        if case .startFetch = cache.acquire(key: Self.key(1), credential: "gis", now: 1_601, waiter: "b") {
        } else {
            Issue.record("the credential still backs off after a token was obtained")
        }
    }

    @Test func aReloadForgetsTheRefusal() {
        var cache = Cache()
        Self.refuse(&cache, key: Self.key(0), at: 0)
        cache.forget(credential: "gis")
        #expect(!cache.holds(credential: "gis"))
        if case .startFetch = cache.acquire(key: Self.key(1), credential: "gis", now: 1, waiter: "b") {
        } else {
            Issue.record("a changed credential inherited the old refusal")
        }
    }
}
