import Dispatch

/// The call sites of the ``TokenStore``: a token request goes through the store's claim (a fleet may have the
/// token already, or be fetching it), its result is published, a rejected token is withdrawn, and the refresh
/// token of an `oauth-user` credential is the store's when it has one. Everything here runs on the service queue.
extension TokenService: TokenStoreObserver {
    /// `[cluster]`'s state as this replica sees it; nil without `[cluster]`. Any thread.
    public var clusterStatus: ClusterStatus? {
        (tokenStore as? ClusterTokenStore)?.status.withLock { $0 }
    }

    /// The store's name for the token of `c` at `root`; nil for a credential not configured now.
    func slot(_ c: Credential, root: String, isPortal: Bool) -> TokenSlot? {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let fingerprint = fingerprints[c.name] else { return nil }
        var grant: String?
        if oauthUsers.contains(c.name) {
            grant = currentSignIn(name: c.name)?.signIn
        }
        return TokenSlot(
            key: Self.key(c.name, root: root, isPortal: isPortal), credential: c.name, fingerprint: fingerprint,
            grant: grant)
    }

    /// The cache said a token request must start for `ticket`: the store says whether another replica's token
    /// serves instead, or lets this process fetch (holding the fleet's lock when there is one).
    func fetchThroughStore(
        _ ticket: TokenCache<Completion>.FetchTicket, _ c: Credential, root: String, isPortal: Bool
    ) {
        dispatchPrecondition(condition: .onQueue(queue))
        // Traced when an exchange asked (``TokenTrace``): a span for the token request, whose own HTTP requests
        // carry its traceparent (``HTTPFetch`` reads the bound context), and one for the fleet's lock.
        let trace = ProxyTracing.active == nil ? nil : TokenTrace.current
        guard let slot = slot(c, root: root, isPortal: isPortal) else {
            let span = trace.map { TokenFetchSpans.fetch($0, c, root: root) }
            TokenFetchSpans.within(span) {
                fetcher.fetch(c, root: root, isPortal: isPortal) { [self] result in
                    TokenFetchSpans.end(span, result)
                    finish(ticket, c, root: root, result: result)
                }
            }
            return
        }
        let holding = cache.withLock { $0.entries[ticket.key]?.token }
        let lockWait = trace.map { TokenFetchSpans.lockWait($0, c) }
        tokenStore.claim(slot, holding: holding, rejected: rejectedValues[ticket.key]) { [self] claim in
            switch claim {
            case .shared(let t):
                TokenFetchSpans.endLockWait(lockWait, outcome: "shared")
                finish(ticket, c, root: root, result: .success(t), shared: true)
            case .fetch(let lease):
                TokenFetchSpans.endLockWait(lockWait, outcome: lease == nil ? "unlocked" : "lease")
                let span = trace.map { TokenFetchSpans.fetch($0, c, root: root) }
                TokenFetchSpans.within(span) {
                    fetcher.fetch(c, root: root, isPortal: isPortal) { [self] result in
                        TokenFetchSpans.end(span, result)
                        switch result {
                        case .success(let t): tokenStore.publish(slot, token: t, lease: lease)
                        case .failure: if let lease { tokenStore.abandon(slot, lease: lease) }
                        }
                        finish(ticket, c, root: root, result: result)
                    }
                }
            }
        }
    }

    /// `token` of `c` at `root` was rejected: remembered, so the store does not hand it back, and withdrawn from
    /// the store (only if it still holds that very token).
    func withdrawShared(_ c: Credential, root: String, isPortal: Bool, token: IssuedToken) {
        dispatchPrecondition(condition: .onQueue(queue))
        let key = Self.key(c.name, root: root, isPortal: isPortal)
        rejectedValues[key] = token.value
        guard let slot = slot(c, root: root, isPortal: isPortal) else { return }
        tokenStore.withdraw(slot, token: token)
    }

    /// The refresh token of the `oauth-user` credential `name`: the shared store's when it has an answer (it is
    /// the authority for a fleet: `login` and `signout` write it there), the state file's otherwise. A change of
    /// sign-in the store shows (a new `login`, a sign-out) drops the tokens of the old one; a new refresh token of the
    /// same sign-in (another replica's exchange) keeps them. What the store has is copied into this replica's state
    /// file (``saveRenewedRefreshToken(_:replacing:)``): a sign-in made on another machine is exchanged here on time
    /// too, and a restart while Redis cannot be reached goes on with the newest refresh token.
    func currentSignIn(name: String) -> TokenStateFile.StoredRefreshToken? {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let fingerprint = fingerprints[name],
            case .some(let shared) = tokenStore.sharedRefreshToken(credential: name, fingerprint: fingerprint)
        else { return refreshTokens[name] }
        // A refresh token seeded in proxy.conf (not a sign-in) that no replica has rotated yet: the local one.
        if shared == nil, !oauthUsers.contains(name) { return refreshTokens[name] }
        let now = shared?.signIn
        if let before = sharedGrants[name], before != now {
            cache.withLock { $0.grantChanged(credential: name) }
            logger.notice(
                now == nil ? "refresh token removed from the fleet's store" : "new refresh token in the fleet's store",
                metadata: ["credential": "\(name)"])
        }
        sharedGrants[name] = .some(now)
        guard let shared else { return nil }
        let mine = refreshTokens[name]
        guard mine?.refreshToken != shared.refreshToken else { return shared }
        if let mine, mine.signIn == shared.signIn, (mine.expires ?? 0) > (shared.expires ?? 0) {
            // Exchanged here while Redis could not be used: the fleet gets this one (if it still has the old).
            _ = tokenStore.finishExchange(shared, exchanged: mine, lease: nil)
            return mine
        }
        if let mine, mine.signIn == shared.signIn {
            logger.info(
                "the sign-in's refresh token was exchanged by another replica: using the new one",
                metadata: ["credential": "\(name)"])
        }
        saveRenewedRefreshToken(shared, replacing: nil)
        return shared
    }

    func currentRefreshToken(name: String) -> String? { currentSignIn(name: name)?.refreshToken }

    func currentRefreshToken(_ c: Credential) -> String? { currentRefreshToken(name: c.name) }

    func sharedTokenWithdrawn(_ slot: TokenSlot, matches: (IssuedToken) -> Bool) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let held = cache.withLock({ $0.entries[slot.key]?.token }), matches(held) else { return }
        rejectedValues[slot.key] = held.value
        _ = cache.withLock { $0.invalidate(credential: slot.credential, value: held.value) }
        logger.info(
            "token withdrawn by another replica (rejected upstream): dropped it here",
            metadata: ["credential": "\(slot.credential)", "root": "\(slot.root)"])
    }

    func heldToken(_ slot: TokenSlot) -> IssuedToken? {
        dispatchPrecondition(condition: .onQueue(queue))
        return cache.withLock { $0.entries[slot.key]?.token }
    }

    func sharedSignInChanged() {
        dispatchPrecondition(condition: .onQueue(queue))
        for name in oauthUsers.sorted() { _ = currentRefreshToken(name: name) }
    }
}
