import Dispatch
import Foundation
import Logging
import Synchronization

/// Obtains, caches, refreshes and persists tokens for every token-type credential.
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
///   token (cached under `credential|portal root`).
///
/// Token work runs on the service's own queue with its own libcurl multi handle; event loops read valid
/// tokens through a lock-protected snapshot (``cachedToken(for:key:)``) without a thread hop.
public final class TokenService: @unchecked Sendable {
    let queue = DispatchQueue(label: "authproxy.tokens")
    private let multi: CurlMulti
    private let logger: Logger
    private let timeoutSeconds: Int
    private let stateFile: TokenStateFile
    /// Valid tokens by key: what event loops read.
    private let snapshot = Mutex<[String: IssuedToken]>([:])
    /// Keys whose server rejected a fresh token: their backoff and the token last rejected (handed out while
    /// backing off, so clients get the server's own answer). Read by event loops on every rejection.
    private let rejections = Mutex<[String: Rejections]>([:])

    struct Rejections {
        var backoff = TokenBackoff()
        var token: IssuedToken?
    }

    // Confined to `queue`.
    private var entries: [String: Entry] = [:]
    private var infos: [String: InfoEntry] = [:]
    private var refreshTokens: [String: TokenStateFile.StoredRefreshToken] = [:]
    private var fingerprints: [String: String] = [:]
    /// The state file version last read or written by this process (see ``reloadIfChanged()``).
    private var fileStamp: TokenStateFile.Stamp?
    private var watcher: (any DispatchSourceTimer)?
    /// Network credentials (server trust above all) for the token service and `rest/info` requests.
    private let store: CredentialStore
    private let oauthUsers: Set<String>

    public typealias Completion = @Sendable (Result<IssuedToken, TokenError>) -> Void

    struct Entry {
        var credential: String
        var fingerprint: String
        var token: IssuedToken?
        var inFlight = false
        var waiters: [Completion] = []
        var backoff = TokenBackoff()
        var lastError: TokenError?
        /// A request wanted a token while the key was backing off: probe when the backoff ends.
        var wantedWhileBackingOff = false
        var probeScheduled = false
    }

    struct ServerInfo {
        var tokenServicesURL: String?
        var owningSystemURL: String?
        var shortLivedTokenValidity: Int?
    }

    struct InfoEntry {
        var info: ServerInfo?
        var fetchedAt: Int64 = 0
        var waiters: [(Result<ServerInfo, TokenError>) -> Void] = []
    }

    public init(credentials: [Credential], stateDir: String, stateKey: String?, timeoutSeconds: Int, logger: Logger) {
        multi = CurlMulti(queue: queue)
        self.logger = logger
        self.timeoutSeconds = timeoutSeconds
        stateFile = TokenStateFile(directory: stateDir, secret: stateKey)
        for c in credentials { fingerprints[c.name] = Crypto.sha256Hex(c.identityMaterial) }
        store = CredentialStore(credentials)
        oauthUsers = Set(credentials.compactMap { c in if case .oauthUser = c.kind { c.name } else { nil } })
    }

    private func network(for url: String) -> NetworkAuth {
        HTTPURL.parse(url).map { store.network(for: $0.target) } ?? NetworkAuth()
    }

    /// Loads saved tokens that still belong to an unchanged credential. Call once before serving.
    ///
    /// A damaged file is renamed aside (with a warning) and serving starts empty; a wrong `state_key` or an
    /// unreadable file throws, so the proxy never starts with a state it would overwrite.
    public func loadState() throws(StateError) {
        var contents: TokenStateFile.Contents
        do throws(StateError) {
            // No lock to read: writers replace the file by rename, so a reader sees one whole version.
            contents = try stateFile.load()
        } catch where error.kind == .damaged {
            let aside = try stateFile.withLock { () throws(StateError) in try stateFile.quarantine() }
            logger.warning("token state file is damaged: renamed it aside and starting without saved tokens",
                metadata: ["file": "\(stateFile.path)", "renamed_to": "\(aside)", "cause": "\(error)"])
            contents = TokenStateFile.Contents()
        }
        var restored = 0
        queue.sync {
            fileStamp = stateFile.stamp()
            for t in contents.tokens where fingerprints[t.credential] == t.fingerprint {
                entries[t.key] = Entry(credential: t.credential, fingerprint: t.fingerprint, token: t.token)
                restored += 1
            }
            for r in contents.refreshTokens where fingerprints[r.credential] == r.fingerprint {
                refreshTokens[r.credential] = r
            }
            publish()
            startWatching()
        }
        if restored > 0 { logger.notice("restored tokens from state", metadata: ["count": "\(restored)", "file": "\(stateFile.path)"]) }
    }

    /// Checks the state file once a second: `authproxy login` and `signout` (other processes) change it,
    /// and a running proxy must follow without a restart.
    private func startWatching() {
        dispatchPrecondition(condition: .onQueue(queue))
        let t = DispatchSource.makeTimerSource(queue: queue)
        t.schedule(deadline: .now() + 1, repeating: 1, leeway: .milliseconds(200))
        t.setEventHandler { [weak self] in self?.reloadIfChanged() }
        t.resume()
        watcher = t
    }

    /// Re-reads the state file when another process replaced it: new or removed refresh tokens take effect
    /// (the access tokens of a user who signed out or signed in again are dropped), and tokens another proxy
    /// saved for keys this one has never used are adopted.
    func reloadIfChanged() {
        dispatchPrecondition(condition: .onQueue(queue))
        let stamp = stateFile.stamp()
        guard stamp != fileStamp else { return }
        fileStamp = stamp
        let contents: TokenStateFile.Contents
        do {
            contents = try stateFile.load()
        } catch {
            logger.error("cannot re-read the token state file changed by another process; keeping the tokens in memory",
                metadata: ["file": "\(stateFile.path)", "cause": "\(error)"])
            return
        }
        follow(contents)
    }

    /// Takes over what another process put in the state file (`contents`, as read now).
    private func follow(_ contents: TokenStateFile.Contents) {
        var current: [String: TokenStateFile.StoredRefreshToken] = [:]
        for r in contents.refreshTokens where fingerprints[r.credential] == r.fingerprint { current[r.credential] = r }
        var changed = false
        for name in oauthUsers where current[name]?.refreshToken != refreshTokens[name]?.refreshToken {
            // Signed out, or signed in again (perhaps as another user): tokens from the old grant must go.
            for (k, e) in entries where e.credential == name && e.token != nil {
                entries[k]?.token = nil
                changed = true
            }
            logger.notice(current[name] == nil ? "refresh token removed by another process" : "new refresh token from another process",
                metadata: ["credential": "\(name)"])
        }
        refreshTokens = current
        let now = nowMillis()
        for t in contents.tokens where fingerprints[t.credential] == t.fingerprint && !t.token.isExpired(at: now) {
            if oauthUsers.contains(t.credential), current[t.credential] == nil { continue }
            // Only for keys this proxy has never used: a token it dropped (rejected upstream, old grant) is
            // still in the file until the next save and must not come back.
            if entries[t.key] == nil {
                entries[t.key] = Entry(credential: t.credential, fingerprint: t.fingerprint, token: t.token)
                changed = true
            }
        }
        if changed { publish() }
    }

    /// The cache key of a request to `target` under credential `c`.
    public static func key(for c: Credential, target: URLTarget) -> String {
        "\(c.name)|\(ServerRoot.normalized(ServerRoot.of(target).root))"
    }

    /// A token usable right now without waiting, if there is one. A token inside its refresh margin is
    /// returned and a background refresh is started.
    public func cachedToken(for c: Credential, target: URLTarget) -> IssuedToken? {
        switch c.kind {
        case .apiKey(let key):
            return IssuedToken(value: key, expires: nil, issued: 0, ssl: false, referer: nil)
        case .token(let t, let referer, let expires):
            guard !(expires.map { nowMillis() >= $0 } ?? false) else { return nil }
            return IssuedToken(value: t, expires: expires, issued: 0, ssl: false, referer: referer)
        default:
            break
        }
        let key = Self.key(for: c, target: target)
        guard let t = snapshot.withLock({ $0[key] }) else { return nil }
        let now = nowMillis()
        if t.isExpired(at: now) { return nil }
        if t.needsRefresh(at: now) {
            queue.async { [self] in acquire(c, target: target, forceRefresh: true) { _ in } }
        }
        return t
    }

    /// Gets a token for a request to `target`, waiting for a token request when needed. `completion` runs on
    /// the service queue.
    public func token(for c: Credential, target: URLTarget, completion: @escaping Completion) {
        switch c.kind {
        case .apiKey, .token:
            if let t = cachedToken(for: c, target: target) {
                completion(.success(t))
            } else {
                completion(.failure(TokenError(credential: c.name,
                    message: "the pregenerated token has expired; put a new token in proxy.conf and restart")))
            }
            return
        default:
            queue.async { [self] in acquire(c, target: target, forceRefresh: false, completion: completion) }
        }
    }

    /// The upstream rejected `token` (498/499 in any form) on `attempt` of a request: decides with
    /// ``TokenRetryPolicy`` whether to refresh and retry, and records what that means — the token is forgotten
    /// before a refresh; a fresh token rejected makes the key back off (the token is kept, so clients keep
    /// getting the upstream's own answer while no new token may be requested).
    public func rejected(_ c: Credential, target: URLTarget, token: IssuedToken, attempt: Int,
        replayImpossible: String?) -> TokenRetryPolicy.Action
    {
        let key = Self.key(for: c, target: target)
        let now = nowMillis()
        var pregenerated = false
        if case .token = c.kind { pregenerated = true }
        let backingOff = rejections.withLock { $0[key]?.backoff.isBackingOff(at: now) ?? false }
        let action = TokenRetryPolicy.decide(.init(attempt: attempt, pregenerated: pregenerated,
            refreshable: c.isRefreshable, tokenIsFresh: token.fresh, backingOff: backingOff,
            replayImpossible: replayImpossible))
        switch action {
        case .relay(_, serverRejectsNewTokens: true):
            var wait: Int64 = 0
            var count = 0
            var unfresh = token
            unfresh.fresh = false
            rejections.withLock { r in
                var st = r[key] ?? Rejections()
                // Requests that shared one fresh token report it together: one failure, not one per request.
                if !st.backoff.isBackingOff(at: now) { wait = st.backoff.failed(at: now) }
                count = st.backoff.failures
                st.token = unfresh
                r[key] = st
            }
            if wait > 0 {
                logger.warning("the server rejects new tokens: relaying its rejection and backing off",
                    metadata: ["credential": "\(c.name)", "root": "\(ServerRoot.of(target).root)",
                        "consecutive": "\(count)", "retry_in_s": "\(wait / 1000)",
                        "hint": "check the credential's referer/client binding, the user's access, and the clocks"])
            }
        case .relay(_, serverRejectsNewTokens: false) where backingOff:
            break  // keep the token: no new one may be requested yet
        default:
            invalidate(c, target: target, value: token.value)
        }
        return action
    }

    /// Whether the key of a request to `target` is backing off because its server rejected new tokens, and
    /// until when.
    func rejectionBackoff(for c: Credential, target: URLTarget) -> TokenBackoff? {
        let key = Self.key(for: c, target: target)
        return rejections.withLock { $0[key]?.backoff }
    }

    /// The upstream rejected `value` (498/499): forget it so the next request gets a fresh one. A token
    /// already replaced by another request's refresh is left alone.
    public func invalidate(_ c: Credential, target: URLTarget, value: String) {
        let key = Self.key(for: c, target: target)
        // Out of the snapshot at once, so the retry that follows cannot pick the rejected token up again.
        snapshot.withLock { if $0[key]?.value == value { $0[key] = nil } }
        queue.async { [self] in
            // Every key holding that value: a portal token used as is for a non-federated server is also
            // cached under the portal's key, which must not hand it out again.
            var changed = false
            for (k, e) in entries where e.credential == c.name && e.token?.value == value {
                entries[k]?.token = nil
                changed = true
            }
            if changed { publish() }
        }
    }

    // MARK: - single flight

    private func acquire(_ c: Credential, target: URLTarget, forceRefresh: Bool, completion: @escaping Completion) {
        dispatchPrecondition(condition: .onQueue(queue))
        let (root, isPortal) = ServerRoot.of(target)
        acquire(c, root: root, isPortal: isPortal, forceRefresh: forceRefresh, completion: completion)
    }

    private func acquire(_ c: Credential, root: String, isPortal: Bool, forceRefresh: Bool, completion: @escaping Completion) {
        let key = "\(c.name)|\(ServerRoot.normalized(root))"
        let fingerprint = fingerprints[c.name] ?? ""
        var e = entries[key] ?? Entry(credential: c.name, fingerprint: fingerprint)
        let now = nowMillis()
        if let t = e.token, !t.isExpired(at: now), !(forceRefresh && t.needsRefresh(at: now)) {
            completion(.success(t))
            return
        }
        if forceRefresh, e.token != nil, e.inFlight { return }  // a background refresh is already running
        if let st = rejections.withLock({ $0[key] }), st.backoff.isBackingOff(at: now) {
            // The server rejected fresh tokens: no new one until the backoff allows it. The token it rejected
            // last goes out meanwhile (even if a concurrent refresh dropped it), so clients get its answer.
            if let t = [e.token, st.token].compactMap({ $0 }).first(where: { !$0.isExpired(at: now) }) {
                completion(.success(t))
            } else {
                let b = st.backoff
                completion(.failure(TokenError(credential: c.name,
                    message: "the server at \(root) rejects newly issued tokens (check the referer/client binding, the user's access and the clocks)",
                    retryAt: b.retryAt)))
            }
            return
        }
        e.waiters.append(completion)
        if e.inFlight {
            entries[key] = e
            return
        }
        if e.backoff.isBackingOff(at: now), var err = e.lastError {
            // Backing off after a failure: answer at once instead of hammering the token service, say when
            // the next attempt is, and make sure one happens then.
            err.retryAt = e.backoff.retryAt
            let waiters = e.waiters
            e.waiters = []
            e.wantedWhileBackingOff = true
            entries[key] = e
            scheduleProbe(c, key: key, root: root, isPortal: isPortal)
            for w in waiters { w(.failure(err)) }
            return
        }
        e.inFlight = true
        e.wantedWhileBackingOff = false
        entries[key] = e
        fetch(c, root: root, isPortal: isPortal) { [self] result in
            guard var e = entries[key] else { return }
            e.inFlight = false
            let waiters = e.waiters
            e.waiters = []
            switch result {
            case .success(let t):
                e.token = t
                e.backoff.succeeded()
                e.lastError = nil
                entries[key] = e
                publish()
                persist()
                logger.info("token obtained", metadata: ["credential": "\(c.name)", "root": "\(root)",
                    "expires_in_s": "\(t.expires.map { ($0 - nowMillis()) / 1000 } ?? -1)"])
            case .failure(let err):
                let wait = err.local ? 0 : e.backoff.failed(at: nowMillis())
                e.lastError = err
                // A token that is only due for refresh stays usable until it really expires.
                if let t = e.token, t.isExpired(at: nowMillis()) { e.token = nil }
                entries[key] = e
                publish()
                logger.warning("token request failed", metadata: ["credential": "\(c.name)", "root": "\(root)",
                    "cause": "\(err.message)", "retry_in_s": "\(wait / 1000)"])
            }
            for w in waiters {
                switch result {
                case .success(var t):
                    t.fresh = true  // this request waited for it: the upstream has never seen it
                    w(.success(t))
                case .failure(var err):
                    if let t = e.token {
                        w(.success(t))
                    } else {
                        if e.backoff.isBackingOff(at: nowMillis()) { err.retryAt = e.backoff.retryAt }
                        w(.failure(err))
                    }
                }
            }
        }
    }

    /// One probe when the key's backoff ends, if a request wanted a token meanwhile: recovery does not wait
    /// for the next request to arrive after the deadline (and the one that does finds a token).
    private func scheduleProbe(_ c: Credential, key: String, root: String, isPortal: Bool) {
        guard var e = entries[key], !e.probeScheduled else { return }
        e.probeScheduled = true
        entries[key] = e
        let delay = max(0, e.backoff.retryAt - nowMillis())
        queue.asyncAfter(deadline: .now() + .milliseconds(Int(delay))) { [self] in
            guard var e = entries[key] else { return }
            e.probeScheduled = false
            entries[key] = e
            guard e.wantedWhileBackingOff, !e.inFlight, e.token == nil || e.token!.isExpired(at: nowMillis()) else { return }
            logger.info("backoff over: probing the token service", metadata: ["credential": "\(c.name)", "root": "\(root)"])
            acquire(c, root: root, isPortal: isPortal, forceRefresh: false) { _ in }
        }
    }

    private func dropToken(_ c: Credential, value: String) {
        for (k, e) in entries where e.credential == c.name && e.token?.value == value { entries[k]?.token = nil }
        publish()
    }

    private func publish() {
        var valid: [String: IssuedToken] = [:]
        let now = nowMillis()
        for (k, e) in entries { if let t = e.token, !t.isExpired(at: now) { valid[k] = t } }
        snapshot.withLock { $0 = valid }
    }

    /// Saves the valid tokens (read-modify-write under the file lock, so a concurrent `login` or `signout`
    /// is never undone). A file that cannot be read is not overwritten.
    private func persist() {
        reloadIfChanged()  // a sign-out that just happened must not be written back
        let now = nowMillis()
        let ours = entries.compactMap { (k, e) -> TokenStateFile.StoredToken? in
            guard let t = e.token, !t.isExpired(at: now) else { return nil }
            return TokenStateFile.StoredToken(key: k, credential: e.credential, fingerprint: e.fingerprint, token: t)
        }
        let keys = Set(ours.map(\.key))
        let fingerprints = fingerprints
        let oauthUsers = oauthUsers
        let grants = refreshTokens.mapValues(\.refreshToken)
        do {
            let result = try stateFile.update { (contents: inout TokenStateFile.Contents) throws(StateError) in
                // A user signed out, or in again, between our last look and the lock: the tokens we hold
                // for them belong to the old grant and must not be written back.
                var inFile: [String: String] = [:]
                for r in contents.refreshTokens where fingerprints[r.credential] == r.fingerprint { inFile[r.credential] = r.refreshToken }
                let mine = ours.filter { !oauthUsers.contains($0.credential) || (inFile[$0.credential] != nil && inFile[$0.credential] == grants[$0.credential]) }
                contents.tokens = contents.tokens.filter { !keys.contains($0.key) && fingerprints[$0.credential] == $0.fingerprint } + mine
                contents.tokens.sort { $0.key < $1.key }
                // Refresh tokens in the file are left as they are (`login` and `signout` own them).
            }
            fileStamp = result.stamp
            follow(result.contents)  // what another writer changed just before the lock
            if let aside = result.quarantined {
                logger.warning("token state file was damaged: renamed it aside", metadata: ["file": "\(stateFile.path)", "renamed_to": "\(aside)"])
            }
        } catch {
            logger.error("cannot save token state; the file is left as it is", metadata: ["cause": "\(error)"])
        }
    }

    // MARK: - fetching, per credential type

    private func fetch(_ c: Credential, root: String, isPortal: Bool, done: @escaping (Result<IssuedToken, TokenError>) -> Void) {
        switch c.kind {
        case .apiKey, .token, .serverTrust, .password, .kerberos, .certificate:
            done(.failure(TokenError(credential: c.name, message: "not a refreshable credential")))
        case .arcgisToken(let s):
            generateWithPassword(c, s, root: root, isPortal: isPortal, done: done)
        case .oauthApp(let o):
            let portal = o.portalURL
            if isPortal || ServerRoot.same(root, portal) {
                clientCredentials(c, o, done: done)
            } else {
                viaPortal(c, portal: portal, root: root, done: done)
            }
        case .oauthUser(let o):
            if isPortal || ServerRoot.same(root, o.portalURL) {
                refreshGrant(c, o, done: done)
            } else {
                viaPortal(c, portal: o.portalURL, root: root, done: done)
            }
        }
    }

    /// A server root under an OAuth credential: the portal token, exchanged for a server token when the server
    /// says it is federated with that portal.
    ///
    /// When the portal refuses the exchange because the portal token itself is dead (revoked or expired early:
    /// a portal restart, a password change, "revoke all tokens"), the portal token is dropped, a new one
    /// obtained as the credential's type dictates, and the exchange made once more — all for the request
    /// that is waiting, which then gets its retry instead of a 502.
    private func viaPortal(_ c: Credential, portal: String, root: String, done: @escaping (Result<IssuedToken, TokenError>) -> Void) {
        serverInfo(c, root: root) { [self] info in
            // The completion runs on the service queue (token requests complete there).
            nonisolated(unsafe) let done = done
            guard case .success(let i) = info, let owner = i.owningSystemURL, ServerRoot.same(owner, portal) else {
                // Not federated (e.g. hosted services): the portal token is used as is.
                acquire(c, root: portal, isPortal: true, forceRefresh: false) { done($0) }
                return
            }
            exchangeWithPortalToken(c, portal: portal, root: root, renewed: false, done: done)
        }
    }

    private func exchangeWithPortalToken(_ c: Credential, portal: String, root: String, renewed: Bool,
        done: @escaping (Result<IssuedToken, TokenError>) -> Void)
    {
        nonisolated(unsafe) let done = done
        acquire(c, root: portal, isPortal: true, forceRefresh: false) { [self] portalResult in
            switch portalResult {
            case .failure(let e): done(.failure(e))
            case .success(let portalToken):
                exchange(c, portalToken: portalToken, portal: portal, serverRoot: root) { [self] result in
                    guard case .failure(let e) = result, e.tokenRejected else {
                        done(result)
                        return
                    }
                    dropToken(c, value: portalToken.value)
                    if renewed {
                        done(result)  // a brand-new portal token refused as well: report, do not loop
                        return
                    }
                    logger.info("the portal refused its own token for the exchange: getting a new portal token",
                        metadata: ["credential": "\(c.name)", "portal": "\(portal)", "root": "\(root)"])
                    exchangeWithPortalToken(c, portal: portal, root: root, renewed: true, done: done)
                }
            }
        }
    }

    private func generateWithPassword(_ c: Credential, _ s: ArcGISTokenSettings, root: String, isPortal: Bool,
        done: @escaping (Result<IssuedToken, TokenError>) -> Void)
    {
        let proceed: (ServerInfo?) -> Void = { [self] info in
            let tokenURL: String
            if let u = s.tokenURL {
                tokenURL = u
            } else if isPortal {
                tokenURL = ServerRoot.sharingRest(root) + "/generateToken"
            } else if let u = info?.tokenServicesURL ?? info?.owningSystemURL.map({ ServerRoot.sharingRest($0) + "/generateToken" }) {
                // rest/info is the server's word: never send a password to another host, or over http when
                // the server itself is https, on its say-so alone.
                guard Self.isSafeTokenService(u, for: root) else {
                    done(.failure(TokenError(credential: c.name,
                        message: "\(root)/rest/info names the token service \(Self.redacted(u)) on another host or without https; set token_url to trust it")))
                    return
                }
                tokenURL = u
            } else {
                done(.failure(TokenError(credential: c.name,
                    message: "\(root)/rest/info does not name a token service; set token_url")))
                return
            }
            var fields = [("username", s.username), ("password", s.password), ("client", s.client)]
            if let r = s.referer, s.client == "referer" { fields.append(("referer", r)) }
            if let m = s.expirationMinutes ?? info?.shortLivedTokenValidity { fields.append(("expiration", String(m))) }
            fields.append(("f", "json"))
            post(c, url: tokenURL, fields: fields) { [self] result in
                switch result {
                case .failure(let e): done(.failure(e))
                case .success(let json):
                    guard var t = parseGenerateToken(c, json, service: tokenURL, done: done) else { return }
                    t.referer = s.client == "referer" ? s.referer : nil
                    // A portal token for a server federated with that portal is exchanged for a server token.
                    let portalRoot = tokenURL.lowercased().firstRange(of: "/sharing/").map { String(tokenURL[..<$0.lowerBound]) }
                    if !isPortal, let portalRoot, let owner = info?.owningSystemURL, ServerRoot.same(owner, portalRoot) {
                        exchange(c, portalToken: t, portal: portalRoot, serverRoot: root, done: done)
                    } else {
                        done(.success(t))
                    }
                }
            }
        }
        if s.tokenURL != nil && s.expirationMinutes != nil || isPortal {
            proceed(nil)
        } else {
            serverInfo(c, root: root) { info in
                if case .failure(let e) = info, s.tokenURL == nil {
                    done(.failure(e))
                    return
                }
                proceed(try? info.get())
            }
        }
    }

    private func clientCredentials(_ c: Credential, _ o: OAuthAppSettings, done: @escaping (Result<IssuedToken, TokenError>) -> Void) {
        var fields = [("grant_type", "client_credentials"), ("client_id", o.clientID), ("client_secret", o.clientSecret)]
        if let m = o.expirationMinutes { fields.append(("expiration", String(m))) }
        fields.append(("f", "json"))
        let url = ServerRoot.sharingRest(o.portalURL) + "/oauth2/token"
        post(c, url: url, fields: fields) { [self] result in
            switch result {
            case .failure(let e): done(.failure(e))
            case .success(let json): if let t = parseOAuth(c, json, service: url, done: done) { done(.success(t)) }
            }
        }
    }

    private func refreshGrant(_ c: Credential, _ o: OAuthUserSettings, done: @escaping (Result<IssuedToken, TokenError>) -> Void) {
        // The file is the authority on refresh tokens (`authproxy login` writes them, `signout` removes them):
        // look at it before every refresh grant (rare), so a new login or a sign-out takes effect at once.
        reloadIfChanged()
        guard let refresh = refreshTokens[c.name] else {
            done(.failure(TokenError(credential: c.name,
                message: "no refresh token yet: run `authproxy login --config <file> --credential \(c.name)`", local: true)))
            return
        }
        let url = ServerRoot.sharingRest(o.portalURL) + "/oauth2/token"
        post(c, url: url, fields: [("grant_type", "refresh_token"), ("client_id", o.clientID),
            ("refresh_token", refresh.refreshToken), ("f", "json")]) { [self] result in
            switch result {
            case .failure(let e): done(.failure(e))
            case .success(let json): if let t = parseOAuth(c, json, service: url, done: done) { done(.success(t)) }
            }
        }
    }

    /// Federation: a portal token → a token for `serverRoot` (portal `generateToken` with `token` + `serverUrl`).
    private func exchange(_ c: Credential, portalToken: IssuedToken, portal: String, serverRoot: String,
        done: @escaping (Result<IssuedToken, TokenError>) -> Void)
    {
        let url = ServerRoot.sharingRest(portal) + "/generateToken"
        post(c, url: url, fields: [("token", portalToken.value), ("serverUrl", serverRoot), ("f", "json")]) { [self] result in
            switch result {
            case .failure(let e): done(.failure(e))
            case .success(let json):
                if var t = parseGenerateToken(c, json, service: url, done: done) {
                    t.referer = portalToken.referer
                    done(.success(t))
                }
            }
        }
    }

    // MARK: - rest/info discovery

    private func serverInfo(_ c: Credential, root: String, done: @escaping (Result<ServerInfo, TokenError>) -> Void) {
        let key = ServerRoot.normalized(root)
        var e = infos[key] ?? InfoEntry()
        if let info = e.info, nowMillis() - e.fetchedAt < 10 * 60 * 1000 {
            done(.success(info))
            return
        }
        e.waiters.append(done)
        infos[key] = e
        guard e.waiters.count == 1 else { return }
        let url = root + "/rest/info?f=json"
        let f = HTTPFetch(multi: multi, method: "GET", url: url, form: nil, timeoutSeconds: timeoutSeconds,
            network: network(for: url)) { [self] result in
            var e = infos[key] ?? InfoEntry()
            let waiters = e.waiters
            e.waiters = []
            let outcome: Result<ServerInfo, TokenError>
            switch result {
            case .failure(let err):
                outcome = .failure(TokenError(credential: c.name, message: "cannot read \(root)/rest/info: \(err.message)"))
            case .success(let r):
                if let json = try? JSONSerialization.jsonObject(with: Data(r.body)) as? [String: Any], json["error"] == nil {
                    let auth = json["authInfo"] as? [String: Any]
                    let info = ServerInfo(
                        tokenServicesURL: auth?["tokenServicesUrl"] as? String,
                        owningSystemURL: json["owningSystemUrl"] as? String,
                        shortLivedTokenValidity: (auth?["shortLivedTokenValidity"] as? NSNumber)?.intValue)
                    e.info = info
                    e.fetchedAt = nowMillis()
                    outcome = .success(info)
                } else {
                    outcome = .failure(TokenError(credential: c.name,
                        message: "\(root)/rest/info answered HTTP \(r.status) without server information"))
                }
            }
            infos[key] = e
            for w in waiters { w(outcome) }
        }
        f.start()
    }

    // MARK: - token service calls

    private func post(_ c: Credential, url: String, fields: [(String, String)],
        done: @escaping (Result<[String: Any], TokenError>) -> Void)
    {
        let f = HTTPFetch(multi: multi, method: "POST", url: url, form: fields, timeoutSeconds: timeoutSeconds,
            network: network(for: url)) { result in
            switch result {
            case .failure(let err):
                done(.failure(TokenError(credential: c.name, message: "token service \(Self.redacted(url)) failed: \(err.message)")))
            case .success(let r):
                guard let json = try? JSONSerialization.jsonObject(with: Data(r.body)) as? [String: Any] else {
                    done(.failure(TokenError(credential: c.name,
                        message: "token service \(Self.redacted(url)) answered HTTP \(r.status) without JSON")))
                    return
                }
                // `{"error":{…}}`, or the unwrapped `{"code":498,"message":…}` of older servers.
                let unwrapped = json["error"] == nil && json["code"] != nil && json["token"] == nil && json["access_token"] == nil
                if let err = json["error"] ?? (unwrapped ? json : nil) {
                    let e = err as? [String: Any]
                    let message = (e?["message"] as? String) ?? (e?["error_description"] as? String) ?? (err as? String) ?? "error"
                    let details = (e?["details"] as? [Any])?.compactMap { $0 as? String } ?? []
                    let code = (e?["code"] as? NSNumber)?.intValue
                    var failure = TokenError(credential: c.name,
                        message: "token service \(Self.redacted(url)) refused: \(message)", details: details)
                    failure.tokenRejected = code == 498 || code == 499 || (e?["messageCode"] as? String) == "GWM_0003"
                    done(.failure(failure))
                    return
                }
                done(.success(json))
            }
        }
        f.start()
    }

    private func parseGenerateToken(_ c: Credential, _ json: [String: Any], service: String,
        done: (Result<IssuedToken, TokenError>) -> Void) -> IssuedToken?
    {
        guard let value = json["token"] as? String, !value.isEmpty else {
            done(.failure(TokenError(credential: c.name, message: "token service \(Self.redacted(service)) returned no token")))
            return nil
        }
        let expires = (json["expires"] as? NSNumber)?.int64Value
        return IssuedToken(value: value, expires: expires, issued: nowMillis(), ssl: (json["ssl"] as? Bool) ?? false, referer: nil)
    }

    private func parseOAuth(_ c: Credential, _ json: [String: Any], service: String,
        done: (Result<IssuedToken, TokenError>) -> Void) -> IssuedToken?
    {
        guard let value = json["access_token"] as? String, !value.isEmpty else {
            done(.failure(TokenError(credential: c.name, message: "token service \(Self.redacted(service)) returned no access_token")))
            return nil
        }
        let now = nowMillis()
        let expiresIn = (json["expires_in"] as? NSNumber)?.int64Value
        return IssuedToken(value: value, expires: expiresIn.map { now + $0 * 1000 }, issued: now,
            ssl: (json["ssl"] as? Bool) ?? false, referer: nil)
    }

    /// A discovered token service is trusted only on the server's own host, and not over http for an https
    /// server.
    static func isSafeTokenService(_ url: String, for root: String) -> Bool {
        guard let u = HTTPURL.parse(url), let r = HTTPURL.parse(root) else { return false }
        if r.target.scheme == "https" && u.target.scheme != "https" { return false }
        return u.target.host == r.target.host
    }

    /// A URL without its query string, for messages.
    static func redacted(_ url: String) -> String { String(url.prefix { $0 != "?" }) }

    // MARK: - login / sign-out support

    /// Stores a refresh token obtained by `authproxy login`, bound to the credential's current settings
    /// (read-modify-write under the file lock). Returns where a damaged file was moved, if it was.
    @discardableResult
    public static func storeRefreshToken(_ c: Credential, config: ProxyConfig, refreshToken: String, expires: Int64?,
        username: String?) throws(StateError) -> String?
    {
        let file = TokenStateFile(directory: config.stateDir, secret: config.stateKey)
        let stored = TokenStateFile.StoredRefreshToken(credential: c.name,
            fingerprint: Crypto.sha256Hex(c.identityMaterial), refreshToken: refreshToken, expires: expires, username: username)
        let result = try file.update { (contents: inout TokenStateFile.Contents) throws(StateError) in
            contents.refreshTokens.removeAll { $0.credential == c.name }
            contents.refreshTokens.append(stored)
            // Access tokens from an earlier sign-in of this credential belong to the old grant.
            contents.tokens.removeAll { $0.credential == c.name }
        }
        return result.quarantined
    }
}
