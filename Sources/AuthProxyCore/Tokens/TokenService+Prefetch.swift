import Dispatch

/// `prefetch = true`: a token for each of the credential's server roots is requested at start and refreshed before
/// it enters the refresh margin's last stretch, so no request waits for a token service and `/readyz` can say
/// whether the tokens are there. Each root checks again only when ``PrefetchPlan`` says something is due (every
/// second only while a token request runs), so an idle proxy stays idle between refreshes.
extension TokenService {
    /// The URLs whose server roots a prefetching credential holds tokens for: one per match prefix (the prefix
    /// itself names the root, e.g. `https://gis.example.com/arcgis`).
    static func prefetchTargets(_ c: Credential) -> [URLTarget] {
        // One token serves every request of an oauth2 credential: it is kept for the provider.
        if let t = (c.kind as? any FetchedTokenKind)?.prefetchTarget { return [t] }
        var seen = Set<String>()
        return c.match.compactMap { prefix in
            guard let u = prefetchTarget(prefix, portal: portalRoot(c)), seen.insert(key(for: c, target: u)).inserted
            else { return nil }
            return u
        }
    }

    /// The URL a prefix is prefetched for: the prefix itself, which names a server root (`https://host/arcgis`)
    /// or a portal (`https://host/portal`, `…/sharing/rest`); nil for a host alone (`https://host`). Which server
    /// root or portal the requests under a host will use is known only from their paths, so nothing can be
    /// fetched ahead for it (and `/readyz` does not wait for it); ``unprefetchable(_:)`` names such prefixes.
    ///
    /// A prefix that is the credential's portal (`portal_url` of an OAuth credential, the portal of a `token_url`
    /// under `/sharing/`) is prefetched as that portal (`…/sharing/rest/`), under the key its API requests use.
    static func prefetchTarget(_ prefix: MatchPrefix, portal: String?) -> URLTarget? {
        var text = prefix.description
        if let portal, ServerRoot.same(text, portal) { text = ServerRoot.sharingRest(text) }
        guard case .absolute(let u)? = try? RequestHeadParser.parseTarget(method: "GET", text + "/"),
            u.path.contains(where: { $0 != "/" })
        else { return nil }
        return u
    }

    /// The portal root a credential names itself, if any.
    static func portalRoot(_ c: Credential) -> String? {
        (c.kind as? any FetchedTokenKind)?.portalRoot
    }

    /// The `match` prefixes of a `prefetch = true` credential that name no ArcGIS API root (see
    /// ``prefetchTarget(_:)``), for a warning at start and in `check`.
    public static func unprefetchable(_ c: Credential) -> [String] {
        guard c.prefetch, let k = c.kind as? any FetchedTokenKind, k.prefetchTarget == nil else { return [] }
        return c.match.filter { prefetchTarget($0, portal: portalRoot(c)) == nil }.map(\.description)
    }

    /// Starts prefetching for `credentials` (those with `prefetch = true`).
    public func startPrefetching(_ credentials: [Credential]) {
        let fingerprints = credentials.map { Crypto.sha256Hex($0.identityMaterial) }
        queue.async { [self] in
            for (c, fingerprint) in zip(credentials, fingerprints) where c.prefetch && c.isRefreshable {
                guard prefetching[c.name] != fingerprint else { continue }  // already running with these settings
                prefetching[c.name] = fingerprint
                for target in Self.prefetchTargets(c) { prefetchTick(c, target: target, fingerprint: fingerprint) }
            }
        }
    }

    /// Stops prefetching for the credentials named (removed or changed by a reload, or the service retired).
    public func stopPrefetching(_ names: [String]) {
        queue.async { [self] in
            for n in names { prefetching[n] = nil }
        }
    }

    /// The token keys prefetching keeps, for readiness: (credential, key).
    public static func prefetchKeys(_ credentials: [Credential]) -> [(credential: String, key: String)] {
        credentials.filter { $0.prefetch && $0.isRefreshable }.flatMap { c in
            prefetchTargets(c).map { (c.name, key(for: c, target: $0)) }
        }
    }

    /// The status of `key`, nil when no token was ever asked for under it.
    public func status(key: String) -> TokenStatus? {
        let now = clock.nowMillis()
        return cache.withLock { $0.status(key: key, now: now) }
    }

    private func prefetchTick(_ c: Credential, target: URLTarget, fingerprint: String) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard prefetching[c.name] == fingerprint else { return }
        let key = Self.key(for: c, target: target)
        let now = clock.nowMillis()
        let plan = cache.withLock { PrefetchPlan.next(key: key, in: $0, now: now) }
        switch plan.action {
        case .fetch:
            token(for: c, target: target) { _ in }
        case .refresh:
            // Hands out the token still held and starts its background refresh (single flight with requests).
            _ = cachedToken(for: c, target: target)
        case .none:
            break
        }
        guard let wait = plan.checkIn else { return }
        runAfter(wait) { [self] in
            prefetchTick(c, target: target, fingerprint: fingerprint)
        }
    }
}
