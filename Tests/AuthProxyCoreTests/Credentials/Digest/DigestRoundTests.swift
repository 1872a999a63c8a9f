import Testing

@testable import AuthProxyCore

@Suite struct DigestRoundTests {
    private let fresh = AuthChallenge.parse(#"Digest realm="r", nonce="1", qop="auth""#)
    private let stale = AuthChallenge.parse(#"Digest realm="r", nonce="2", qop="auth", stale=true"#)

    @Test func answersOnceThenRelaysARefusal() {
        var r = DigestRound()
        guard case .answer(let c, .auth) = r.decide(status: 401, challenges: fresh, hasBody: false) else {
            Issue.record("not answered")
            return
        }
        #expect(c.nonce == "1" && r.answers == 1 && r.sentLogin)
        // The same login refused (a wrong password): the client gets the 401.
        #expect(r.decide(status: 401, challenges: fresh, hasBody: false) == .relay)
    }

    @Test func aStaleNonceIsAnsweredOnceMore() {
        var r = DigestRound()
        _ = r.decide(status: 401, challenges: fresh, hasBody: true)
        guard case .answer(let c, _) = r.decide(status: 401, challenges: stale, hasBody: true) else {
            Issue.record("stale not answered")
            return
        }
        #expect(c.nonce == "2" && r.answers == 2)
        #expect(r.decide(status: 401, challenges: stale, hasBody: true) == .relay)
    }

    @Test func aPreemptiveLoginRefusedIsAnswered() {
        var r = DigestRound()
        r.sendingPreemptive()
        #expect(r.sentLogin && r.answers == 0)
        guard case .answer = r.decide(status: 401, challenges: stale, hasBody: false) else {
            Issue.record("not answered")
            return
        }
    }

    @Test func otherAnswersAndSchemesAreRelayed() {
        var r = DigestRound()
        #expect(r.decide(status: 200, challenges: [], hasBody: false) == .relay)
        #expect(r.decide(status: 403, challenges: fresh, hasBody: false) == .relay)
        #expect(r.decide(status: 401, challenges: AuthChallenge.parse(#"Basic realm="b""#), hasBody: false) == .relay)
        #expect(r.answers == 0 && !r.sentLogin)
    }

    @Test func refusalsNameTheCause() {
        var r = DigestRound()
        let authInt = AuthChallenge.parse(#"Digest realm="r", nonce="1", qop="auth-int""#)
        #expect(r.decide(status: 401, challenges: authInt, hasBody: true) == .refuse(.authIntWithBody))
        #expect(r.answers == 0)
    }
}

@Suite struct DigestSessionCacheTests {
    private func key(_ host: String) -> DigestSessionCache.Key {
        .init(credential: "c", user: "u", host: host, port: 80)
    }

    private func challenge(_ algorithm: String = "MD5") throws -> DigestChallenge {
        try DigestChallenge(
            try #require(
                AuthChallenge.parse(#"Digest realm="r", nonce="n", qop="auth", algorithm=\#(algorithm)"#).first))
    }

    @Test func countsNCAndDrops() throws {
        var cache = DigestSessionCache()
        #expect(cache.use(key("a"), newCnonce: { "" })?.nc == nil)
        cache.start(key("a"), challenge: try challenge(), qop: .auth, cnonce: "first")
        let one = cache.use(key("a"), newCnonce: { "fresh" })
        let two = cache.use(key("a"), newCnonce: { "fresh" })
        #expect(one?.nc == 2 && two?.nc == 3 && one?.cnonce == "fresh")
        cache.drop(key("a"))
        #expect(cache.use(key("a"), newCnonce: { "" })?.nc == nil && cache.count == 0)
    }

    @Test func aChallengeWithTheSessionsNonceKeepsCounting() throws {
        // Two requests met the same challenge (a server's nonce is the same for every connection): the second
        // answer must not send an `nc` the first already used.
        var cache = DigestSessionCache()
        #expect(cache.start(key("a"), challenge: try challenge(), qop: .auth, cnonce: "x") == 1)
        #expect(cache.use(key("a"), newCnonce: { "" })?.nc == 2)
        #expect(cache.start(key("a"), challenge: try challenge(), qop: .auth, cnonce: "y") == 3)
        // A new nonce starts again at 1.
        let fresh = try DigestChallenge(
            try #require(AuthChallenge.parse(#"Digest realm="r", nonce="other", qop="auth""#).first))
        #expect(cache.start(key("a"), challenge: fresh, qop: .auth, cnonce: "z") == 1)
    }

    @Test func sessionAlgorithmsKeepTheirCnonce() throws {
        var cache = DigestSessionCache()
        cache.start(key("a"), challenge: try challenge("MD5-sess"), qop: .auth, cnonce: "first")
        #expect(cache.use(key("a"), newCnonce: { "fresh" })?.cnonce == "first")
    }

    @Test func boundedLeastRecentlyUsedFirst() throws {
        var cache = DigestSessionCache(capacity: 2)
        let c = try challenge()
        cache.start(key("a"), challenge: c, qop: .auth, cnonce: "")
        cache.start(key("b"), challenge: c, qop: .auth, cnonce: "")
        _ = cache.use(key("a"), newCnonce: { "" })
        cache.start(key("c"), challenge: c, qop: .auth, cnonce: "")
        #expect(cache.count == 2)
        #expect(cache.use(key("b"), newCnonce: { "" })?.nc == nil)
        #expect(cache.use(key("a"), newCnonce: { "" })?.nc != nil && cache.use(key("c"), newCnonce: { "" })?.nc != nil)
    }
}
