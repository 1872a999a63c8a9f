import Logging
import Synchronization
import Testing

@testable import AuthProxyCore

/// ``TokenService`` through its ``TokenStore`` seam, with a store in memory that answers claims as a test says:
/// a shared token serves without a token request, a lease is given back when the request fails, a rejection
/// withdraws the token from the store, a withdrawal elsewhere drops it here, and saved tokens are restored.
@Suite struct TokenStoreSeamTests {
    /// A store in memory: records every call, answers claims with `answer`.
    final class MemoryStore: TokenStore, @unchecked Sendable {
        // Touched on the service queue, read by the test after a `queue.sync`.
        var contents = TokenStateFile.Contents()
        var answer: TokenClaim = .fetch(nil)
        var claims: [(slot: TokenSlot, holding: String?, rejected: String?)] = []
        var published: [(TokenSlot, IssuedToken, TokenLease?)] = []
        var abandoned: [(TokenSlot, TokenLease)] = []
        var withdrawn: [(TokenSlot, String)] = []
        var refresh: [String: TokenStateFile.StoredRefreshToken]? = nil
        weak var observer: (any TokenStoreObserver)?

        var location: String { "memory" }
        func load() throws(StateError) -> TokenStoreLoad { TokenStoreLoad(contents: contents) }
        func changes() -> Result<TokenStateFile.Contents, StateError>? { nil }
        func update(_ body: (inout TokenStateFile.Contents) throws(StateError) -> Void) throws(StateError)
            -> TokenStateFile.UpdateResult
        {
            try body(&contents)
            return TokenStateFile.UpdateResult(contents: contents, quarantined: nil, stamp: nil)
        }
        func claim(_ slot: TokenSlot, holding: IssuedToken?, rejected: String?, done: @escaping (TokenClaim) -> Void) {
            claims.append((slot, holding?.value, rejected))
            done(answer)
        }
        func publish(_ slot: TokenSlot, token: IssuedToken, lease: TokenLease?) {
            published.append((slot, token, lease))
        }
        func abandon(_ slot: TokenSlot, lease: TokenLease) { abandoned.append((slot, lease)) }
        func withdraw(_ slot: TokenSlot, token: IssuedToken) { withdrawn.append((slot, token.value)) }
        func shareRefreshToken(_ stored: TokenStateFile.StoredRefreshToken) {
            refresh = (refresh ?? [:]).merging([stored.credential: stored]) { $1 }
        }
        func sharedRefreshToken(credential: String, fingerprint: String) -> TokenStateFile.StoredRefreshToken?? {
            guard let refresh else { return nil }
            return .some(refresh[credential])
        }
        var exchangeAnswer: ExchangeClaim = .exchange(nil)
        var finished: [(old: String, new: String)] = []
        func claimExchange(_ current: TokenStateFile.StoredRefreshToken, done: @escaping (ExchangeClaim) -> Void) {
            done(exchangeAnswer)
        }
        func finishExchange(
            _ current: TokenStateFile.StoredRefreshToken, exchanged: TokenStateFile.StoredRefreshToken,
            lease: TokenLease?
        ) -> Bool? {
            finished.append((current.refreshToken, exchanged.refreshToken))
            guard var r = refresh else { return nil }
            guard r[current.credential]?.refreshToken == current.refreshToken else { return false }
            r[current.credential] = exchanged
            refresh = r
            return true
        }
        func abandonExchange(_ current: TokenStateFile.StoredRefreshToken, lease: TokenLease) {}
    }

    /// Token service at 127.0.0.1:9 (discard: refused at once), so a token request that really starts fails.
    static let gis = """
        [[credential]]
        name = "gis"
        type = "arcgis-token"
        username = "u"
        password = "p"
        token_url = "http://127.0.0.1:9/arcgis/tokens/generateToken"
        match = ["http://127.0.0.1:9/arcgis"]
        """
    static let url = "http://127.0.0.1:9/arcgis/rest/services/A/MapServer"

    static func service(_ c: Credential, _ store: MemoryStore, clock: FakeClock) -> TokenService {
        TokenService(
            credentials: [c], tokenStore: store, timeoutSeconds: 5,
            logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }), clock: clock)
    }

    static func target(_ url: String) throws -> URLTarget {
        guard case .absolute(let u) = try RequestHeadParser.parseTarget(method: "GET", url) else { throw Bad() }
        return u
    }

    struct Bad: Error {}

    /// Asks for a token and waits for the answer.
    static func token(_ s: TokenService, _ c: Credential, _ url: String) async throws -> Result<IssuedToken, TokenError>
    {
        let t = try target(url)
        return await withCheckedContinuation { k in s.token(for: c, target: t) { k.resume(returning: $0) } }
    }

    @Test func aSharedTokenServesWithoutATokenRequestAndIsCachedAndSaved() async throws {
        let clock = FakeClock(1_700_000_000_000)
        let c = try TokenTestSupport.credential(Self.gis)
        let store = MemoryStore()
        let shared = IssuedToken(
            value: "T-shared", expires: clock.nowMillis() + 600_000, issued: clock.nowMillis(), ssl: false, referer: nil
        )
        store.answer = .shared(shared)
        let s = Self.service(c, store, clock: clock)

        let got = try await Self.token(s, c, Self.url)
        #expect(try got.get().value == "T-shared")
        // Not fresh: a rejection of it later is an expiry, not the server refusing new tokens.
        #expect(try got.get().fresh == false)
        s.queue.sync {
            #expect(store.claims.count == 1)
            #expect(store.claims[0].slot.key == TokenTestSupport.key(c, Self.url))
            #expect(store.claims[0].slot.fingerprint == Crypto.sha256Hex(c.identityMaterial))
            #expect(store.claims[0].holding == nil && store.claims[0].rejected == nil)
            #expect(store.published.isEmpty)
            // Saved through the store like a token of its own.
            #expect(store.contents.tokens.map(\.token.value) == ["T-shared"])
        }
        // Cached: the next request asks nobody.
        #expect(s.cachedToken(for: c, target: try Self.target(Self.url))?.value == "T-shared")
        s.queue.sync { #expect(store.claims.count == 1) }
    }

    @Test func aFailedTokenRequestGivesItsLeaseBackAndPublishesNothing() async throws {
        let clock = FakeClock(SystemWallClock().nowMillis())
        let c = try TokenTestSupport.credential(Self.gis)
        let store = MemoryStore()
        store.answer = .fetch(TokenLease(value: "lease-1"))
        let s = Self.service(c, store, clock: clock)

        let got = try await Self.token(s, c, Self.url)
        guard case .failure = got else {
            Issue.record("a token service on the discard port cannot answer")
            return
        }
        s.queue.sync {
            #expect(store.claims.count == 1)
            #expect(store.abandoned.map(\.1) == [TokenLease(value: "lease-1")])
            #expect(store.published.isEmpty)
        }
    }

    @Test func aRejectedTokenIsWithdrawnAndNotTakenBackFromTheStore() async throws {
        let clock = FakeClock(1_700_000_000_000)
        let c = try TokenTestSupport.credential(Self.gis)
        let store = MemoryStore()
        let old = IssuedToken(
            value: "T-old", expires: clock.nowMillis() + 600_000, issued: clock.nowMillis(), ssl: false, referer: nil)
        store.answer = .shared(old)
        let s = Self.service(c, store, clock: clock)
        let token = try await Self.token(s, c, Self.url).get()

        let action = s.rejected(c, target: try Self.target(Self.url), token: token, attempt: 1, replayImpossible: nil)
        #expect(action == .refreshAndRetry)
        let newer = IssuedToken(
            value: "T-new", expires: clock.nowMillis() + 600_000, issued: clock.nowMillis(), ssl: false, referer: nil)
        s.queue.sync {
            #expect(store.withdrawn.map(\.1) == ["T-old"])
            store.answer = .shared(newer)
        }
        // The retry's claim tells the store which token was rejected, so the store never hands it back.
        #expect(try await Self.token(s, c, Self.url).get().value == "T-new")
        s.queue.sync {
            #expect(store.claims.last?.rejected == "T-old")
        }
    }

    @Test func aTokenWithdrawnByAnotherReplicaIsDroppedOnlyIfItIsTheOneHeld() async throws {
        let clock = FakeClock(1_700_000_000_000)
        let c = try TokenTestSupport.credential(Self.gis)
        let store = MemoryStore()
        store.answer = .shared(
            IssuedToken(
                value: "T1", expires: clock.nowMillis() + 600_000, issued: clock.nowMillis(), ssl: false, referer: nil))
        let s = Self.service(c, store, clock: clock)
        _ = try await Self.token(s, c, Self.url).get()
        let target = try Self.target(Self.url)
        let slot = s.queue.sync { store.claims[0].slot }

        // A notice about another token (an older one) changes nothing.
        s.queue.sync { store.observer?.sharedTokenWithdrawn(slot) { $0.value == "T0" } }
        #expect(s.cachedToken(for: c, target: target)?.value == "T1")
        // About this one: dropped, and remembered as rejected for the next claim.
        s.queue.sync { store.observer?.sharedTokenWithdrawn(slot) { $0.value == "T1" } }
        #expect(s.cachedToken(for: c, target: target) == nil)
        s.queue.sync { #expect(s.rejectedValues[slot.key] == "T1") }
    }

    @Test func savedTokensAreRestoredFromTheStoreOnlyForUnchangedCredentials() throws {
        let clock = FakeClock(1_700_000_000_000)
        let c = try TokenTestSupport.credential(Self.gis)
        let store = MemoryStore()
        let key = TokenTestSupport.key(c, Self.url)
        let t = IssuedToken(
            value: "T-saved", expires: clock.nowMillis() + 600_000, issued: clock.nowMillis(), ssl: false, referer: nil)
        store.contents.tokens = [
            .init(key: key, credential: "gis", fingerprint: Crypto.sha256Hex(c.identityMaterial), token: t),
            .init(key: "gis|http://127.0.0.1:9/other", credential: "gis", fingerprint: "changed", token: t),
        ]
        let s = Self.service(c, store, clock: clock)
        try s.loadState()
        #expect(s.cachedToken(for: c, target: try Self.target(Self.url))?.value == "T-saved")
        #expect(s.status(key: "gis|http://127.0.0.1:9/other") == nil)
    }

    @Test func theStoresRefreshTokenIsTheAuthorityAndItsChangeIsANewSignIn() throws {
        let (c, store, fp) = try Self.signedInUser()
        store.refresh = [
            "me": .init(credential: "me", fingerprint: fp, refreshToken: "R1", expires: nil, username: "alice")
        ]
        let s = Self.service(c, store, clock: FakeClock(1_700_000_000_000))
        s.queue.sync {
            s.refreshTokens["me"] = .init(
                credential: "me", fingerprint: fp, refreshToken: "R-file", expires: nil, username: nil)
            #expect(s.currentRefreshToken(name: "me") == "R1")
            let grant1 = s.slot(c, root: "http://127.0.0.1:9/portal", isPortal: true)?.grant
            // Signed in again elsewhere: a new grant, so shared tokens of the old one get other names.
            store.refresh = [
                "me": .init(credential: "me", fingerprint: fp, refreshToken: "R2", expires: nil, username: "alice")
            ]
            let grant2 = s.slot(c, root: "http://127.0.0.1:9/portal", isPortal: true)?.grant
            #expect(grant1 != nil && grant2 != nil && grant1 != grant2)
            // Signed out elsewhere: no refresh token, even though this replica's file still has one.
            store.refresh = [:]
            #expect(s.currentRefreshToken(name: "me") == nil)
            // The store cannot be asked (Redis down): the file's copy, which follows the store's last sign-in.
            store.refresh = nil
            #expect(s.currentRefreshToken(name: "me") == "R2")
        }
    }

    @Test func aRotatedRefreshTokenIsSharedAndNeverFallsBackToTheSpentSeed() throws {
        let c = try TokenTestSupport.credential(
            """
            [[credential]]
            name = "gw"
            type = "oauth2"
            token_url = "http://127.0.0.1:9/token"
            client_id = "app"
            client_secret = "s"
            grant = "refresh_token"
            refresh_token = "SEED"
            match = ["http://127.0.0.1:9/ogc"]
            """)
        let store = MemoryStore()
        store.refresh = [:]  // a fleet store that answers, with no refresh token for it yet
        let s = Self.service(c, store, clock: FakeClock(1_700_000_000_000))
        s.queue.sync {
            // Nothing rotated yet: no stored refresh token, so the fetcher spends the configured seed.
            #expect(s.currentRefreshToken(name: "gw") == nil)
            // The provider rotated it: the fleet gets the new one at once, and every replica spends that one.
            s.keepRotatedRefreshToken(c, "R2")
            #expect(store.refresh?["gw"]?.refreshToken == "R2")
            #expect(s.currentRefreshToken(name: "gw") == "R2")
            // The store lost it (a Redis restart): not a sign-out for a seeded grant, the local copy serves, not
            // the spent seed.
            store.refresh = [:]
            #expect(s.currentRefreshToken(name: "gw") == "R2")
        }
    }

    /// An `oauth-user` credential "me", an empty store, and the credential's fingerprint.
    private static func signedInUser() throws -> (Credential, MemoryStore, String) {
        let c = try TokenTestSupport.credential(
            """
            [[credential]]
            name = "me"
            type = "oauth-user"
            client_id = "app"
            portal_url = "http://127.0.0.1:9/portal"
            redirect_uri = "urn:ietf:wg:oauth:2.0:oob"
            match = ["http://127.0.0.1:9/portal"]
            """)
        return (c, MemoryStore(), Crypto.sha256Hex(c.identityMaterial))
    }

    @Test func anExchangedRefreshTokenContinuesTheSignInAndANewLoginDoesNot() throws {
        let (c, store, fp) = try Self.signedInUser()
        let first = TokenStateFile.StoredRefreshToken(
            credential: "me", fingerprint: fp, refreshToken: "R1", expires: 1_700_000_060_000, username: "alice",
            issued: 1_700_000_000_000)
        store.refresh = ["me": first]
        let s = Self.service(c, store, clock: FakeClock(1_700_000_000_000))
        let key = "me|http://127.0.0.1:9/portal/sharing/rest"
        let token = IssuedToken(
            value: "T1", expires: 1_700_000_600_000, issued: 1_700_000_000_000, ssl: false, referer: nil)
        s.queue.sync {
            let grant1 = s.slot(c, root: "http://127.0.0.1:9/portal", isPortal: true)?.grant
            #expect(grant1 == first.signIn)
            _ = s.cache.withLock { $0.adopt(key: key, credential: "me", token: token) }
            // Another replica exchanged it: a new refresh token of the same sign-in, in the store.
            var exchanged = first
            exchanged.refreshToken = "R2"
            exchanged.expires = 1_700_000_120_000
            exchanged.grant = first.signIn
            store.refresh = ["me": exchanged]
            #expect(s.currentRefreshToken(name: "me") == "R2")
            #expect(s.slot(c, root: "http://127.0.0.1:9/portal", isPortal: true)?.grant == grant1)
            #expect(s.cache.withLock { $0.entries[key]?.token?.value } == "T1")  // the sign-in's token stays
            // ... and this replica's file has the new one (a restart without Redis goes on with it).
            #expect(store.contents.refreshTokens.map(\.refreshToken) == ["R2"])
            // A new `login`: another sign-in, whose slots have other names and whose old tokens go.
            store.refresh = [
                "me": .init(credential: "me", fingerprint: fp, refreshToken: "R9", expires: nil, username: "bob")
            ]
            #expect(s.slot(c, root: "http://127.0.0.1:9/portal", isPortal: true)?.grant != grant1)
            #expect(s.cache.withLock { $0.entries[key]?.token } == nil)
        }
    }

    @Test func theStateFileFollowsAnExchangeWithoutDroppingTokens() throws {
        let (c, store, fp) = try Self.signedInUser()
        let first = TokenStateFile.StoredRefreshToken(
            credential: "me", fingerprint: fp, refreshToken: "R1", expires: 1_700_000_060_000, username: nil)
        let s = Self.service(c, store, clock: FakeClock(1_700_000_000_000))
        let key = "me|http://127.0.0.1:9/portal/sharing/rest"
        let token = IssuedToken(
            value: "T1", expires: 1_700_000_600_000, issued: 1_700_000_000_000, ssl: false, referer: nil)
        s.queue.sync {
            s.refreshTokens["me"] = first
            _ = s.cache.withLock { $0.adopt(key: key, credential: "me", token: token) }
            var contents = TokenStateFile.Contents()
            var exchanged = first
            exchanged.refreshToken = "R2"
            exchanged.grant = first.signIn
            contents.refreshTokens = [exchanged]
            s.follow(contents)  // another process sharing the state directory exchanged it
            #expect(s.refreshTokens["me"]?.refreshToken == "R2")
            #expect(s.cache.withLock { $0.entries[key]?.token?.value } == "T1")
            contents.refreshTokens = [
                .init(credential: "me", fingerprint: fp, refreshToken: "R9", expires: nil, username: nil)
            ]
            s.follow(contents)  // `authproxy login` again
            #expect(s.cache.withLock { $0.entries[key]?.token } == nil)
        }
    }
}
