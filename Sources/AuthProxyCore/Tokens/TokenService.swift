import Dispatch
import Logging
import Synchronization

/// Obtains, caches, refreshes and persists tokens for every token-type credential: what the rest of the proxy
/// asks for a token, and tells when the upstream rejected one.
///
/// - One token request per cache key at a time (single flight): requests that need the same token wait for
///   the one in flight.
/// - After a failure the key backs off (``TokenBackoff``: 1 s doubling to 30 s); requests meanwhile get the
///   last error at once, saying when the next attempt will be, and one probe goes out when the backoff ends
///   (if the credential was wanted meanwhile), so a token service that comes back is noticed without waiting
///   for a request to arrive after the deadline.
/// - A server that rejects even a freshly issued token makes the key back off the same way
///   (``TokenRetryPolicy``): clients get the upstream's rejection, and no token is requested until the backoff
///   allows it.
/// - A token within its refresh margin is still handed out while a background refresh runs.
/// - Keys are `credential|server root`: a federated server gets its own token, exchanged from the portal
///   token (cached under `credential|portal root/sharing/rest`, never the key of a server root).
///
/// Those decisions are ``TokenCache``'s; this class carries them out: token requests run on the service's own
/// queue with its own libcurl multi handle (``TokenFetcher``), tokens are saved to and followed in the state
/// file (`TokenService+StateFile.swift`), and event loops read tokens and report rejections through the
/// cache's lock without a thread hop.
///
/// A configuration reload does not replace the service: ``update(credentials:)`` drops what belonged to
/// changed and removed credentials and keeps the tokens, refresh state and backoffs of the others.
///
/// Ownership: `cache` is touched only under its lock, from any thread; every other mutable member (the
/// fetcher, the credential table, the state-file mirror, the watcher) only on `queue`, where every completion
/// runs.
public final class TokenService: @unchecked Sendable {
    let queue = ProxyQueue.ownThread("authproxy.tokens")
    private let multi: CurlMulti
    let logger: Logger
    /// Every time the service's decisions depend on (expiries, backoffs, probe budgets, when to look again)
    /// is read from it: tests drive the schedule with a fake clock.
    let clock: any WallClock
    /// `upstream_timeout_seconds` of the token service's requests: confined to `queue`, set again by a reload
    /// (``update(credentials:timeoutSeconds:)``).
    private var timeoutSeconds: Int
    /// The state file, or a fleet's shared store in front of it (``TokenStore``). Confined to `queue`.
    let tokenStore: any TokenStore
    /// Every token decision, under one lock: event loops read it on every request, the queue changes it.
    let cache = Mutex(TokenCache<Completion>())
    /// The SHA-256 of each configured credential's identity: saved tokens of a credential that changed are not
    /// reused. Confined to `queue` (set again by a reload).
    var fingerprints: [String: String]
    var oauthUsers: Set<String>
    /// The `oauth-user` credentials, by name: their sign-ins are kept alive by exchanging the refresh token
    /// (`TokenService+SignInRenewal.swift`). Confined to `queue` (set again by a reload).
    var signIns: [String: Credential]
    /// Per `oauth-user` credential, where its exchange stands. Confined to `queue`.
    var renewals: [String: SignInRenewal] = [:]
    /// The refresh-token expiry of each sign-in, for the status page and `/metrics` (any thread): rebuilt on `queue`
    /// whenever it may have changed.
    let signInExpiryView = Mutex<[CredentialExpiry]>([])
    /// Network credentials (server trust above all) for the token service and `rest/info` requests.
    private var store: CredentialStore

    // Confined to `queue`.
    var refreshTokens: [String: TokenStateFile.StoredRefreshToken] = [:]
    var watcher: (any DispatchSourceTimer)?
    /// Per cache key, the token value this process last saw rejected (or learnt was withdrawn): a store that still
    /// has it does not hand it back (``TokenStore/claim(_:holding:rejected:done:)``).
    var rejectedValues: [String: String] = [:]
    /// Per `oauth-user` credential, the refresh token the shared store had at the last look (nil inside: none),
    /// to notice a sign-in or sign-out made through another replica.
    var sharedGrants: [String: String?] = [:]
    /// Credentials kept fresh by `prefetch = true`, by name, with the fingerprint of the settings they were
    /// started with (see `TokenService+Prefetch.swift`).
    var prefetching: [String: String] = [:]
    /// Which key of each `api-key` credential is used and which ones the server rejected (per process; event loops
    /// read it on every request with such a credential).
    /// What credential kinds keep for the life of the service (an API key's slot book), by type.
    let kindState = KindState()
    /// Which roots a client's path named may have a token at all (``RootConfirmations``). Confined to `queue`
    /// (internal so tests can set it up there).
    var confirmations = RootConfirmations<Completion>()
    lazy var fetcher = TokenFetcher(
        multi: multi, timeoutSeconds: timeoutSeconds, store: store,
        logger: logger, host: self, clock: clock)

    public typealias Completion = @Sendable (Result<IssuedToken, TokenError>) -> Void

    public convenience init(
        credentials: [Credential], stateDir: String, stateKey: String?, timeoutSeconds: Int, logger: Logger,
        clock: any WallClock = SystemWallClock()
    ) {
        self.init(
            credentials: credentials,
            tokenStore: FileTokenStore(TokenStateFile(directory: stateDir, secret: stateKey, clock: clock)),
            timeoutSeconds: timeoutSeconds, logger: logger, clock: clock)
    }

    init(
        credentials: [Credential], tokenStore: any TokenStore, timeoutSeconds: Int, logger: Logger,
        clock: any WallClock = SystemWallClock()
    ) {
        multi = CurlMulti(queue: queue)
        self.logger = logger
        self.clock = clock
        self.timeoutSeconds = timeoutSeconds
        self.tokenStore = tokenStore
        var fingerprints: [String: String] = [:]
        for c in credentials { fingerprints[c.name] = Crypto.sha256Hex(c.identityMaterial) }
        self.fingerprints = fingerprints
        store = CredentialStore(credentials)
        oauthUsers = Set(credentials.filter(\.signsIn).map(\.name))
        signIns = Self.signInCredentials(credentials)
        tokenStore.observer = self
    }

    /// The cache key of a request to `target` under credential `c`.
    public static func key(for c: Credential, target: URLTarget) -> String {
        let r = root(for: c, target: target)
        return key(c.name, root: r.root, isPortal: r.isPortal)
    }

    /// What a token of `c` for a request to `target` is for (``FetchedTokenKind/tokenScope(for:)``): the ArcGIS
    /// server or portal root of `target`, or the root its kind names (an OAuth provider serves every host it matches).
    static func root(for c: Credential, target: URLTarget) -> (root: String, isPortal: Bool) {
        if case .named(let root)? = (c.kind as? any FetchedTokenKind)?.tokenScope(for: target) { return (root, false) }
        return ServerRoot.of(target)
    }

    /// `credential|server root`, or `credential|portal root/sharing/rest` for a portal: a portal and a server
    /// root under the same path never share a token, a failure backoff or a rejection backoff.
    static func key(_ credential: String, root: String, isPortal: Bool) -> String {
        "\(credential)|\(ServerRoot.normalized(root))\(isPortal ? "/sharing/rest" : "")"
    }

    /// A token usable right now without waiting, if there is one. A token inside its refresh margin is
    /// returned and a background refresh is started; under `refresh = "on_demand"` it is not returned (the
    /// request asks ``token(for:target:completion:)``, which waits for a new one: no refresh outlives a request).
    public func cachedToken(for c: Credential, target: URLTarget) -> IssuedToken? {
        if let fixed = c.kind.fixedToken(c, service: self) { return try? fixed.get() }
        let key = Self.key(for: c, target: target)
        let now = clock.nowMillis()
        guard let (t, refreshDue) = cache.withLock({ $0.cached(key: key, now: now, mode: c.refresh) }) else {
            return nil
        }
        if refreshDue {
            queue.async { [self] in refreshInBackground(c, target: target) }
        }
        return t
    }

    /// Gets a token for a request to `target`, waiting for a token request when needed. `completion` runs on
    /// the service queue.
    /// `trace`: the exchange's, when tracing is on (``TokenTrace``): told whether it waited for its own token request
    /// or another's, and the token request it starts hangs under it.
    public func token(for c: Credential, target: URLTarget, completion: @escaping Completion) {
        token(for: c, target: target, trace: nil, completion: completion)
    }

    func token(for c: Credential, target: URLTarget, trace: TokenTrace?, completion: @escaping Completion) {
        if let fixed = c.kind.fixedToken(c, service: self) {
            completion(fixed)
            return
        }
        switch (c.kind as? any FetchedTokenKind)?.tokenScope(for: target) {
        case .named(let root):
            // No root to confirm: the kind names it, and the token goes wherever the credential matches.
            queue.async { [self] in
                TokenTrace.bound(trace) { acquire(c, root: root, isPortal: false, completion: completion) }
            }
        case .refused(let why):
            completion(.failure(TokenError(credential: c.name, message: why, local: true)))
        case .arcgisRoot:
            queue.async { [self] in
                let (root, isPortal) = ServerRoot.of(target)
                TokenTrace.bound(trace) {
                    confirmThenAcquire(c, root: root, isPortal: isPortal, completion: completion)
                }
            }
        case nil:
            completion(.failure(TokenError(credential: c.name, message: "not a credential with tokens", local: true)))
        }
    }

    /// The roots a credential's configuration names, as cache keys: those of its `match` prefixes (a prefix
    /// without an API segment, `https://host/arcgis`, is taken as a server root and as a portal root, as its
    /// requests may use either), of its `token_url`, and its portal. These need no probe (``RootConfirmations``).
    /// Wildcard prefixes name no root.
    static func configuredRootKeys(_ c: Credential) -> Set<String> {
        var keys = Set<String>()
        func add(_ text: String, both: Bool) {
            guard case .absolute(let u)? = try? RequestHeadParser.parseTarget(method: "GET", text + "/") else { return }
            if let a = ServerRoot.api(u) {
                keys.insert(key(c.name, root: a.root, isPortal: a.isPortal))
            } else if both {
                var root = text
                while root.hasSuffix("/") { root.removeLast() }
                keys.insert(key(c.name, root: root, isPortal: false))
                keys.insert(key(c.name, root: root, isPortal: true))
            }
        }
        for m in c.match where !m.wildcard {
            add(m.description, both: true)
            if c.upgradeToHTTPS, m.scheme == "http" {
                // Tokens are requested for the https URL the request really goes to (upgrade_to_https).
                var h = m
                h.scheme = "https"
                if h.port == nil || h.port == 80 { h.port = nil }
                add(h.description, both: true)
            }
        }
        for r in (c.kind as? any FetchedTokenKind)?.configuredRoots ?? [] { add(r.url, both: r.both) }
        return keys
    }

    /// A root a request's path named gets a token only once confirmed (``RootConfirmations``): configured, or
    /// its `rest/info` answered as an ArcGIS root. Until then no password or client secret is spent on it.
    private func confirmThenAcquire(_ c: Credential, root: String, isPortal: Bool, completion: @escaping Completion) {
        dispatchPrecondition(condition: .onQueue(queue))
        let key = Self.key(c.name, root: root, isPortal: isPortal)
        let configured = Self.configuredRootKeys(c).contains(key)
        let now = clock.nowMillis()
        switch confirmations.check(credential: c.name, key: key, configured: configured, now: now, waiter: completion) {
        case .confirmed:
            acquire(c, root: root, isPortal: isPortal, completion: completion)
        case .wait:
            break
        case .refused(let why):
            completion(.failure(Self.unconfirmed(c, root: root, why, now: now)))
        case .probe:
            fetcher.probeRoot(c, root: root, isPortal: isPortal) { [self] verdict in
                let now = clock.nowMillis()
                let settled = confirmations.settle(credential: c.name, key: key, verdict: verdict, now: now)
                switch settled.decision {
                case .confirmed:
                    logger.info("server root confirmed", metadata: ["credential": "\(c.name)", "root": "\(root)"])
                    for w in settled.waiters { acquire(c, root: root, isPortal: isPortal, completion: w) }
                case .refused(let why):
                    // At most one line per probe, and probes are budgeted per credential: invented roots
                    // cannot flood the log.
                    var meta: Logger.Metadata = ["credential": "\(c.name)", "root": "\(root)"]
                    if case .notARoot(let reason, _) = why { meta["cause"] = "\(reason)" }
                    if case .tooManyRoots(let limit) = why {
                        meta["cause"] = "the credential has \(limit) confirmed roots already"
                    }
                    logger.warning("not a usable ArcGIS root: no token is requested for it", metadata: meta)
                    let error = Self.unconfirmed(c, root: root, why, now: now)
                    for w in settled.waiters { w(.failure(error)) }
                case .probe, .wait:
                    break  // not a settlement's answer
                }
            }
        }
    }

    /// The client's 502 for a root that gets no token at `now`: names the root (the client's own path) and the
    /// cause, never a secret.
    static func unconfirmed(
        _ c: Credential, root: String, _ why: RootConfirmations<Completion>.Refusal, now: Int64
    ) -> TokenError {
        func seconds(_ at: Int64) -> Int64 { max(1, (at - now + 999) / 1000) }
        let advice =
            "A token is requested only for the server roots of the credential's match prefixes and token_url, "
            + "and for roots whose rest/info answers as ArcGIS Server or Portal; list a root as a match prefix to use it without a check."
        switch why {
        case .notARoot(let reason, let retryAt):
            return TokenError(
                credential: c.name,
                message: "\(root) is not a confirmed ArcGIS server root (\(reason)); no token was requested",
                details: ["It is checked again in \(seconds(retryAt)) s.", advice], local: true)
        case .probeBudget(let retryAt):
            return TokenError(
                credential: c.name,
                message:
                    "\(root) is not a confirmed ArcGIS server root, and too many unconfirmed roots were checked for this credential just now; no token was requested",
                details: ["Another root may be checked in \(seconds(retryAt)) s.", advice], local: true)
        case .tooManyRoots(let limit):
            return TokenError(
                credential: c.name,
                message:
                    "\(root) is not a confirmed ArcGIS server root, and the credential already uses \(limit) server roots found through requests (the most it may); no token was requested",
                details: [advice], local: true)
        }
    }

    /// The upstream rejected `token` (498/499 in any form) on `attempt` of a request: decides with
    /// ``TokenRetryPolicy`` whether to refresh and retry, and records what that means — the token is forgotten
    /// before a refresh; a fresh token rejected makes the key back off (the token is kept, so clients keep
    /// getting the upstream's own answer while no new token may be requested).
    public func rejected(
        _ c: Credential, target: URLTarget, token: IssuedToken, attempt: Int,
        replayImpossible: String?
    ) -> TokenRetryPolicy.Action {
        if let action = (c.kind as? any FixedTokenKind)?.rejected(
            c, service: self, token: token, attempt: attempt, replayImpossible: replayImpossible)
        {
            return action
        }
        let key = Self.key(for: c, target: target)
        let pregenerated = c.kind.tokenSource == .fixed
        let now = clock.nowMillis()
        let outcome = cache.withLock {
            $0.rejected(
                key: key, credential: c.name, token: token, attempt: attempt, pregenerated: pregenerated,
                refreshable: c.isRefreshable, replayImpossible: replayImpossible, now: now)
        }
        // The cache forgot the token (a refresh follows): the fleet must not hand it out either.
        if c.isRefreshable, cache.withLock({ $0.entries[key]?.token?.value != token.value }) {
            queue.async { [self] in
                // The root the token was fetched for (an oauth2 credential's is its provider, not an ArcGIS root).
                let r = Self.root(for: c, target: target)
                withdrawShared(c, root: r.root, isPortal: r.isPortal, token: token)
            }
        }
        if let wait = outcome.backoffStarted {
            logger.warning(
                "the server rejects new tokens: relaying its rejection and backing off",
                metadata: [
                    "credential": "\(c.name)", "root": "\(Self.root(for: c, target: target).root)",
                    "consecutive": "\(outcome.consecutive)", "retry_in_s": "\(wait / 1000)",
                    "hint": "check the credential's referer/client binding, the user's access, and the clocks",
                ])
        }
        return outcome.action
    }

    /// A request to `target` that carried `token` got an answer that was no token error: the server accepts
    /// that token (see ``TokenCache/accepted(key:value:now:)``).
    func accepted(_ c: Credential, target: URLTarget, token: IssuedToken) {
        if (c.kind as? any FixedTokenKind)?.accepted(c, service: self, token: token) == true { return }
        // Called for every completed exchange with a token: the key (string work) only when it can matter.
        guard cache.withLock({ $0.awaitsAcceptance }) else { return }
        let key = Self.key(for: c, target: target)
        let now = clock.nowMillis()
        cache.withLock { $0.accepted(key: key, value: token.value, now: now) }
    }

    /// Whether the key of a request to `target` is backing off because its server rejected new tokens, and
    /// until when.
    func rejectionBackoff(for c: Credential, target: URLTarget) -> TokenBackoff? {
        let key = Self.key(for: c, target: target)
        return cache.withLock { $0.rejectionBackoff(key: key) }
    }

    /// The upstream rejected `value` (498/499): forget it so the next request gets a fresh one. A token
    /// already replaced by another request's refresh is left alone.
    public func invalidate(_ c: Credential, target: URLTarget, value: String) {
        // Every key holding that value: a portal token used as is for a non-federated server is also cached
        // under the portal's key, which must not hand it out again.
        _ = cache.withLock { $0.invalidate(credential: c.name, value: value) }
    }

    // MARK: - configuration reload

    /// A configuration reload: `credentials` are the ones configured now. Credentials whose identity
    /// (``Credential/identityMaterial``) changed, and removed ones, lose their tokens, backoffs and refresh
    /// tokens, in memory and in the state file; token requests running for them finish for the exchanges that
    /// waited but are not kept. The others keep everything. Returns the names whose tokens were dropped.
    /// `timeoutSeconds`: `upstream_timeout_seconds` now configured, for token and `rest/info` requests started
    /// from now on (nil: unchanged).
    /// The parent proxies of the configuration now in use, for the requests started from now on.
    func use(routing: ParentRouting?) {
        queue.async { self.fetcher.routing = routing }
    }

    @discardableResult
    public func update(credentials: [Credential], timeoutSeconds: Int? = nil) -> [String] {
        var next: [String: String] = [:]
        for c in credentials { next[c.name] = Crypto.sha256Hex(c.identityMaterial) }
        let store = CredentialStore(credentials)
        let users = Set(credentials.filter(\.signsIn).map(\.name))
        return queue.sync {
            let dropped = fingerprints.keys.filter { next[$0] != fingerprints[$0] }.sorted()
            cache.withLock { cache in
                for name in dropped { cache.forget(credential: name) }
            }
            for name in dropped { confirmations.forget(credential: name) }
            // A key's rejection lasts until a reload puts another key in its slot.
            retainKeySlots(credentials)
            if let timeoutSeconds {
                self.timeoutSeconds = timeoutSeconds
                fetcher.timeoutSeconds = timeoutSeconds
            }
            fingerprints = next
            oauthUsers = users
            signIns = Self.signInCredentials(credentials)
            renewals = renewals.filter { signIns[$0.key] != nil && !dropped.contains($0.key) }
            self.store = store
            fetcher.store = store
            refreshTokens = refreshTokens.filter { next[$0.key] == $0.value.fingerprint }
            // Written now, not at the next token: the file must not hold a dropped credential's tokens for a
            // later start (the fingerprints keep them from being used either way).
            if !dropped.isEmpty { persist() }
            return dropped
        }
    }

    /// Whether `c` is the credential configured now under its name (an exchange that began before a reload
    /// may still carry the previous one).
    private func isCurrent(_ c: Credential) -> Bool {
        fingerprints[c.name] == Crypto.sha256Hex(c.identityMaterial)
    }

    // MARK: - carrying out the cache's decisions (on `queue`)

    private func acquire(_ c: Credential, root: String, isPortal: Bool, completion: @escaping Completion) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard isCurrent(c) else {
            // An exchange that began before a reload changed or removed this credential finishes with the
            // settings it began with: it gets a token made with them, which nothing keeps, so the cache (and
            // the state file) never holds a token of settings no longer configured.
            fetcher.fetch(c, root: root, isPortal: isPortal) { result in
                completion(
                    result.map { t in
                        var t = t
                        t.fresh = true
                        return t
                    })
            }
            return
        }
        noticeSignInChange(c)
        let key = Self.key(c.name, root: root, isPortal: isPortal)
        let now = clock.nowMillis()
        let lookup = cache.withLock {
            $0.acquire(key: key, credential: c.name, now: now, mode: c.refresh, waiter: completion)
        }
        run(lookup, c, root: root, isPortal: isPortal, completion: completion)
    }

    private func refreshInBackground(_ c: Credential, target: URLTarget) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard isCurrent(c) else { return }  // a reload replaced it: its successor refreshes its own tokens
        noticeSignInChange(c)
        let (root, isPortal) = Self.root(for: c, target: target)
        let key = Self.key(c.name, root: root, isPortal: isPortal)
        let now = clock.nowMillis()
        let lookup = cache.withLock { $0.refreshInBackground(key: key, credential: c.name, now: now) }
        run(lookup, c, root: root, isPortal: isPortal, completion: nil)
    }

    /// Does what the cache decided for a request (`completion`: the request's own, when it has one).
    private func run(
        _ lookup: TokenCache<Completion>.Lookup, _ c: Credential, root: String, isPortal: Bool,
        completion: Completion?
    ) {
        if completion != nil, ProxyTracing.active != nil, let trace = TokenTrace.current {
            switch lookup {
            case .ready: trace.source = "cache"
            case .wait: trace.source = "single_flight"
            case .startFetch: trace.source = "own_fetch"
            case .rejectingNewTokens, .backingOff: trace.source = "backoff"
            }
        }
        switch lookup {
        case .ready(let t):
            completion?(.success(t))
        case .wait:
            break
        case .rejectingNewTokens(let retryAt):
            completion?(
                .failure(
                    TokenError(
                        credential: c.name,
                        message:
                            "the server at \(root) rejects newly issued tokens (check the referer/client binding, the user's access and the clocks)",
                        retryAt: retryAt)))
        case .backingOff(let error, _):
            if let delay = ProbeSchedule.delay(for: lookup, now: clock.nowMillis()) {
                scheduleProbe(c, root: root, isPortal: isPortal, after: delay)
            }
            completion?(.failure(error))
        case .startFetch(let ticket):
            fetchThroughStore(ticket, c, root: root, isPortal: isPortal)
        }
    }

    /// `shared`: the token is another replica's (``TokenStore/claim(_:holding:rejected:done:)``), no token
    /// request of this process.
    func finish(
        _ ticket: TokenCache<Completion>.FetchTicket, _ c: Credential, root: String,
        result: Result<IssuedToken, TokenError>, shared: Bool = false
    ) {
        dispatchPrecondition(condition: .onQueue(queue))
        let now = clock.nowMillis()
        let settled = cache.withLock { $0.complete(ticket, with: result, now: now) }
        if shared, settled.outcome == .stored, case .success(let t) = result {
            persist()
            ProxyMetrics.active?.tokenExpiry(credential: c.name, root: root, expires: t.expires)
            logger.info(
                "token taken from the fleet's shared store",
                metadata: [
                    "credential": "\(c.name)", "root": "\(root)",
                    "expires_in_s": "\(t.expires.map { ($0 - now) / 1000 } ?? -1)",
                ])
            // Not fresh for the requests that waited either: it may have served elsewhere for a while, so a
            // rejection of it is an expiry or a revocation (refresh and retry), not the server refusing new tokens.
            for d in settled.deliveries {
                d.waiter(
                    d.result.map { t in
                        var t = t
                        t.fresh = false
                        return t
                    })
            }
            return
        }
        if let m = ProxyMetrics.active {
            switch result {
            case .success(let t):
                m.tokenRequest(credential: c.name, success: true)
                if settled.outcome == .stored { m.tokenExpiry(credential: c.name, root: root, expires: t.expires) }
            case .failure:
                m.tokenRequest(credential: c.name, success: false)
            }
        }
        switch (settled.outcome, result) {
        case (.stored, .success(let t)):
            persist()
            logger.info(
                "token obtained",
                metadata: [
                    "credential": "\(c.name)", "root": "\(root)",
                    "expires_in_s": "\(t.expires.map { ($0 - now) / 1000 } ?? -1)",
                ])
        case (.failed(let wait), .failure(let err)):
            logger.warning(
                "token request failed",
                metadata: [
                    "credential": "\(c.name)", "root": "\(root)",
                    "cause": "\(err.message)", "retry_in_s": "\(wait / 1000)",
                ])
        case (.discarded, _):
            logger.info(
                "token request finished after the credential's sign-in changed: its result is not kept",
                metadata: ["credential": "\(c.name)", "root": "\(root)"])
        default:
            break
        }
        for d in settled.deliveries { d.waiter(d.result) }
    }

    /// An `oauth-user` credential's sign-in may have changed in the state file since the watcher last looked:
    /// follow it before the cache decides, so a token request is never started for a grant about to be
    /// replaced (its token would not be kept, see ``TokenCache/grantChanged(credential:)``).
    private func noticeSignInChange(_ c: Credential) {
        if oauthUsers.contains(c.name) { reloadIfChanged() }
    }

    /// One probe when the key's backoff ends (`delay` from now, see ``ProbeSchedule``), if a request wanted a
    /// token meanwhile: recovery does not wait for the next request to arrive after the deadline (and the one
    /// that does finds a token).
    private func scheduleProbe(_ c: Credential, root: String, isPortal: Bool, after delay: Int64) {
        let key = Self.key(c.name, root: root, isPortal: isPortal)
        runAfter(delay) { [self] in
            noticeSignInChange(c)
            let now = clock.nowMillis()
            guard let lookup = cache.withLock({ $0.probeDue(key: key, now: now) }) else { return }
            logger.info(
                "backoff over: probing the token service", metadata: ["credential": "\(c.name)", "root": "\(root)"])
            run(lookup, c, root: root, isPortal: isPortal, completion: nil)
        }
    }

    /// Runs `work` on the queue `millis` milliseconds from now. When to run is decided on `clock` (by
    /// ``ProbeSchedule`` and ``PrefetchPlan``); the dispatch deadline only carries that wait out, so this is the
    /// one place the service reads dispatch time.
    func runAfter(_ millis: Int64, _ work: @escaping @Sendable () -> Void) {
        queue.asyncAfter(deadline: .now() + .milliseconds(Int(millis)), execute: work)
    }
}

extension TokenService: TokenFetcherHost {
    func portalToken(_ c: Credential, portal: String, done: @escaping (Result<IssuedToken, TokenError>) -> Void) {
        // Token requests complete on this queue, where `done` belongs.
        nonisolated(unsafe) let done = done
        acquire(c, root: portal, isPortal: true) { done($0) }
    }

    func dropToken(_ c: Credential, portal: String, token: IssuedToken) {
        _ = cache.withLock { $0.invalidate(credential: c.name, value: token.value) }
        withdrawShared(c, root: portal, isPortal: true, token: token)
    }

    func refreshToken(for c: Credential) -> String? {
        reloadIfChanged()
        return currentRefreshToken(c)
    }

    func keepRotatedRefreshToken(_ c: Credential, _ value: String) {
        keepRefreshToken(c, value)
    }

    func refreshTokenRenewed(_ c: Credential, spent: String, refreshToken: String?, expires: Int64) {
        renewedByRefreshGrant(c, spent: spent, refreshToken: refreshToken, expires: expires)
    }

    func gatewayToken(_ g: Credential, provider: String, done: @escaping (Result<IssuedToken, TokenError>) -> Void) {
        // Token requests complete on this queue, where `done` belongs.
        nonisolated(unsafe) let done = done
        acquire(g, root: provider, isPortal: false) { done($0) }
    }
}
