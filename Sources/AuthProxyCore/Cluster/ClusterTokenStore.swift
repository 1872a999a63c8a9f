import Dispatch
import Foundation
import Logging
import Synchronization

/// `[cluster]`: the replicas of a fleet share their tokens through one Redis, with the state file as each
/// replica's local fallback (a ``TokenStore``).
///
/// - **Shared tokens**: a token request first looks in Redis (``claim(_:holding:rejected:done:)``); a token found
///   there serves without a request. A token fetched is written there, sealed (``ClusterKeys``), with a TTL of its
///   remaining life.
/// - **Fleet-wide single flight**: before fetching, `SET lock NX PX` with a random lease, then the token key is read
///   again (a token written and its lock released since the first read serves instead). The holder fetches and
///   writes the token with a script that checks the lease is still its own (so a replica whose lock expired cannot
///   overwrite a newer token), releases the lock and publishes a notice. The others wait for the notice (the
///   subscriber) and poll the token key (pub/sub drops messages when a connection does), up to `lock_wait_seconds`
///   (``lockWaitMillis``); then they fetch themselves (a duplicate is better than a failure, and a lock squatted
///   by whoever can write to Redis delays a token need by that wait, not by the lock's whole life).
/// - **Invalidation**: a rejected token is deleted only if it is still the one rejected (compare-and-delete on its
///   digest), and a notice makes every replica drop it at once.
/// - **Redis unavailable**: every operation is bounded by `timeout_ms`; on a failure the replica works alone from
///   memory and the state file, logs once per change of state (naming the cause), and tries again after a backoff.
///
/// Ownership: everything but ``status`` and the subscriber runs on the token service's queue (``TokenStore``);
/// the subscriber has a thread of its own and hands notices to that queue.
final class ClusterTokenStore: TokenStore, @unchecked Sendable {
    let file: FileTokenStore
    let config: ClusterConfig
    let keys: ClusterKeys
    /// How long the lock is held at most: the token request timeout (`upstream_timeout_seconds`), plus room for a
    /// federated exchange's second request.
    let fetchMillis: Int64
    /// How long others wait for the holder's token before fetching it themselves (`lock_wait_seconds`).
    let lockWaitMillis: Int64
    private let logger: Logger
    private let clock: any WallClock
    private let connection: RedisConnection
    private var health = ClusterHealth()
    private var subscriber: RedisSubscriber?
    weak var observer: (any TokenStoreObserver)?
    /// Slots by name, for notices (which carry names only).
    private var slots: [String: TokenSlot] = [:]
    /// Claims waiting for another replica's token, by slot name.
    private var waits: [String: [Wait]] = [:]
    /// For `/readyz` and the status page: read from any thread.
    let status: Mutex<ClusterStatus>

    private struct Wait {
        var slot: TokenSlot
        var holding: String?
        var rejected: String?
        var deadline: Int64
        var done: (TokenClaim) -> Void
    }

    /// How often a waiting replica looks at the token key besides the notices.
    static let pollMillis: Int64 = 100

    init(
        file: FileTokenStore, config: ClusterConfig, keys: ClusterKeys, fetchTimeoutSeconds: Int, logger: Logger,
        clock: any WallClock = SystemWallClock()
    ) {
        self.file = file
        self.config = config
        self.keys = keys
        self.fetchMillis = Int64(fetchTimeoutSeconds) * 1000
        self.lockWaitMillis = Int64(config.lockWaitSeconds) * 1000
        self.logger = logger
        self.clock = clock
        connection = RedisConnection(endpoint: config.endpoint, timeoutMillis: config.timeoutMillis)
        status = Mutex(ClusterStatus(redis: config.endpoint.redacted, required: config.required))
    }

    deinit { subscriber?.stop() }

    var location: String { file.location }

    func load() throws(StateError) -> TokenStoreLoad {
        let loaded = try file.load()
        if let queue = observer?.queue {
            let s = RedisSubscriber(
                config: config, channel: keys.channel, logger: logger,
                onSubscribed: { [weak self] in
                    guard let self else { return }
                    queue.async { self.resubscribed() }
                },
                deliver: { [weak self] text in
                    guard let self else { return }
                    queue.async { self.received(text) }
                })
            subscriber = s
            s.start()
        }
        // Connect now: the first state (connected, or why not) is logged at start, not at the first token.
        _ = use("connect") { _ throws(RedisError) in () }
        return loaded
    }

    func changes() -> Result<TokenStateFile.Contents, StateError>? { file.changes() }

    func update(_ body: (inout TokenStateFile.Contents) throws(StateError) -> Void) throws(StateError)
        -> TokenStateFile.UpdateResult
    {
        try file.update(body)
    }

    // MARK: - claims

    func claim(_ slot: TokenSlot, holding: IssuedToken?, rejected: String?, done: @escaping (TokenClaim) -> Void) {
        let name = keys.name(slot)
        slots[name] = slot
        let outcome: TokenClaim?? = use("claim") { (c) throws(RedisError) -> TokenClaim? in
            if let t = try self.read(name, connection: c) {
                if self.usable(t, holding: holding?.value, rejected: rejected) { return .shared(t) }
                if let rejected, t.value == rejected {
                    // Still the token this replica saw rejected: nobody may get it again.
                    try self.withdraw(name, digest: self.keys.digest(rejected), expires: t.expires, connection: c)
                }
            }
            return try self.lockOrTake(name, holding: holding?.value, rejected: rejected, connection: c)
        }
        switch outcome {
        case .some(.some(.shared(let t))):
            ProxyMetrics.active?.cluster(.sharedHit)
            done(.shared(t))
        case .some(.some(let claim)):
            ProxyMetrics.active?.cluster(.sharedMiss)
            done(claim)
        case .some(.none):
            // Another replica holds the lock: wait for its token.
            ProxyMetrics.active?.cluster(.sharedMiss)
            ProxyMetrics.active?.cluster(.lockWait)
            let w = Wait(
                slot: slot, holding: holding?.value, rejected: rejected, deadline: clock.nowMillis() + lockWaitMillis,
                done: done)
            waits[name, default: []].append(w)
            schedulePoll(name)
        case .none:
            done(.fetch(nil))  // Redis unusable: this replica on its own
        }
    }

    /// A token found in Redis serves unless it is the one held (due for refresh), the one rejected, or near its end.
    private func usable(_ t: IssuedToken, holding: String?, rejected: String?) -> Bool {
        let now = clock.nowMillis()
        return !t.needsRefresh(at: now) && t.value != holding && t.value != rejected
    }

    /// Takes the slot's lock and reads the token key again: `.fetch` with the lease, `.shared` when a usable token
    /// is there after all, nil when another replica holds the lock. The read before the lock is a separate round
    /// trip, and a holder may write its token and release the lock between the two: without this second read the
    /// lock would be free and this replica would request a second token for the same slot. Once the lock is ours no
    /// other replica can write the key (the publish script checks the lease), so this read has the last word.
    private func lockOrTake(
        _ name: String, holding: String?, rejected: String?, connection c: RedisConnection
    ) throws(RedisError) -> TokenClaim? {
        guard let lease = try lock(name, connection: c) else { return nil }
        if let t = try read(name, connection: c), usable(t, holding: holding, rejected: rejected) {
            // Released with a notice, so replicas waiting for this slot look at the key at once too.
            try c.command([
                "EVAL", ClusterKeys.releaseScript, "1", keys.lockKey(name), lease.value, keys.channel,
                ClusterKeys.Notice.unlocked(name).text,
            ])
            return .shared(t)
        }
        return .fetch(lease)
    }

    /// Takes the slot's lock: the lease, or nil when another replica holds it.
    private func lock(_ name: String, connection c: RedisConnection) throws(RedisError) -> TokenLease? {
        let lease = Crypto.hex(Crypto.random(16))
        let r = try c.command(["SET", keys.lockKey(name), lease, "NX", "PX", String(fetchMillis + 5000)])
        return r == .null ? nil : TokenLease(value: lease)
    }

    private func read(_ name: String, connection c: RedisConnection) throws(RedisError) -> IssuedToken? {
        let key = keys.tokenKey(name)
        guard case .string(let v) = try c.command(["GET", key]) else { return nil }
        guard let t = keys.open(v, under: key) else {
            logger.warning(
                "a shared token in Redis does not open with this state_key (another fleet's key, or altered): ignored",
                metadata: ["redis_key": "\(key)"])
            return nil
        }
        return t
    }

    private func schedulePoll(_ name: String) {
        guard let queue = observer?.queue else { return }
        queue.asyncAfter(deadline: .now() + .milliseconds(Int(Self.pollMillis))) { [weak self] in
            self?.recheck(name)
        }
    }

    /// Looks again for the token the waits of `name` wait for (a notice came, or it is time to poll).
    private func recheck(_ name: String) {
        guard let list = waits.removeValue(forKey: name), !list.isEmpty else { return }
        let now = clock.nowMillis()
        var still: [Wait] = []
        for w in list {
            let result: TokenClaim?? = use("wait") { (c) throws(RedisError) -> TokenClaim? in
                if let t = try self.read(name, connection: c), self.usable(t, holding: w.holding, rejected: w.rejected)
                {
                    return .shared(t)
                }
                // The holder gave up, or its lock expired: take over.
                return try self.lockOrTake(name, holding: w.holding, rejected: w.rejected, connection: c)
            }
            switch result {
            case .some(.some(let claim)):
                if case .shared = claim { ProxyMetrics.active?.cluster(.sharedHit) }
                w.done(claim)
            case .some(.none) where now < w.deadline:
                still.append(w)
            case .some(.none):
                ProxyMetrics.active?.cluster(.lockWaitTimeout)
                logger.warning(
                    "the fleet's lock for this token was held longer than lock_wait_seconds: fetching here (another replica's token request is slow, or the lock was not set by a replica)",
                    metadata: [
                        "credential": "\(w.slot.credential)", "root": "\(w.slot.root)",
                        "lock_wait_s": "\(lockWaitMillis / 1000)",
                    ])
                w.done(.fetch(nil))
            case .none:
                w.done(.fetch(nil))
            }
        }
        if !still.isEmpty {
            waits[name, default: []] += still
            schedulePoll(name)
        }
    }

    // MARK: - results

    func publish(_ slot: TokenSlot, token: IssuedToken, lease: TokenLease?) {
        // Without the lock (Redis was down, or the wait timed out) the token stays this replica's: only a lock
        // holder writes, so a late writer never replaces a newer token.
        guard let lease else { return }
        let name = keys.name(slot)
        let key = keys.tokenKey(name)
        let ttl = token.expires.map { $0 - clock.nowMillis() } ?? 86_400_000
        guard ttl > 0, let value = keys.seal(token, under: key) else { return }
        let written = use("publish") { (c) throws(RedisError) -> Bool in
            let r = try c.command([
                "EVAL", ClusterKeys.publishScript, "2", self.keys.lockKey(name), key, lease.value, value, String(ttl),
                self.keys.channel, ClusterKeys.Notice.written(name).text,
            ])
            return r == .integer(1)
        }
        if written == true {
            ProxyMetrics.active?.cluster(.publish)
        } else if written == false {
            logger.info(
                "the fleet's lock for this token expired before it came: kept here, not shared",
                metadata: ["credential": "\(slot.credential)", "root": "\(slot.root)"])
        }
    }

    func abandon(_ slot: TokenSlot, lease: TokenLease) {
        let name = keys.name(slot)
        _ = use("release") { (c) throws(RedisError) in
            try c.command([
                "EVAL", ClusterKeys.releaseScript, "1", self.keys.lockKey(name), lease.value, self.keys.channel,
                ClusterKeys.Notice.unlocked(name).text,
            ])
        }
    }

    func withdraw(_ slot: TokenSlot, token: IssuedToken) {
        let name = keys.name(slot)
        slots[name] = slot
        _ = use("withdraw") { (c) throws(RedisError) in
            try self.withdraw(name, digest: self.keys.digest(token.value), expires: token.expires, connection: c)
        }
    }

    /// How long a withdrawal stays marked: the rejected token's remaining life (a day when it has no expiry), at
    /// least a minute.
    private func markLifetime(_ expires: Int64?) -> Int64 {
        guard let expires else { return 24 * 3600 * 1000 }
        return max(60_000, expires - clock.nowMillis())
    }

    private func withdraw(_ name: String, digest: String, expires: Int64?, connection c: RedisConnection)
        throws(RedisError)
    {
        let r = try c.command([
            "EVAL", ClusterKeys.withdrawScript, "2", keys.tokenKey(name), keys.withdrawnKey(name, digest: digest),
            digest + ".", keys.channel, ClusterKeys.Notice.withdrawn(name, digest: digest).text,
            String(markLifetime(expires)),
        ])
        if r == .integer(1) { ProxyMetrics.active?.cluster(.publish) }
    }

    func sharedRefreshToken(credential: String, fingerprint: String) -> TokenStateFile.StoredRefreshToken?? {
        let key = keys.refreshKey(fingerprint: fingerprint)
        let found = use("refresh token") { (c) throws(RedisError) -> TokenStateFile.StoredRefreshToken? in
            guard case .string(let v) = try c.command(["GET", key]) else { return nil }
            return self.keys.openRefresh(v, under: key)
        }
        guard let found else { return nil }
        return .some(found)
    }

    /// Written while this replica holds the credential's lock (the rotation happened in its token request), so
    /// the next holder reads the new refresh token; then every replica is told.
    func shareRefreshToken(_ stored: TokenStateFile.StoredRefreshToken) {
        let key = keys.refreshKey(fingerprint: stored.fingerprint)
        guard let value = keys.seal(stored, under: key) else { return }
        _ = use("refresh token") { (c) throws(RedisError) in
            var set = ["SET", key, value]
            if let ttl = refreshTTL(stored) { set += ["PX", String(ttl)] }
            try c.command(set)
            try c.command(["PUBLISH", keys.channel, ClusterKeys.Notice.signIn.text])
        }
    }

    /// A refresh token lives in Redis as long as it is valid (as `authproxy login` writes it); nil: no expiry.
    private func refreshTTL(_ stored: TokenStateFile.StoredRefreshToken) -> Int64? {
        stored.expires.map { max(1, $0 - clock.nowMillis()) }
    }

    // MARK: - refresh-token exchange

    /// Reads what Redis holds for the credential first (another replica may have exchanged it already), then takes
    /// the sign-in's lock and reads again (as ``lockOrTake(_:holding:rejected:connection:)``: the holder may have
    /// written and released between the two). Redis unusable: this replica exchanges on its own.
    func claimExchange(_ current: TokenStateFile.StoredRefreshToken, done: @escaping (ExchangeClaim) -> Void) {
        let name = keys.exchangeName(fingerprint: current.fingerprint)
        let refreshKey = keys.refreshKey(fingerprint: current.fingerprint)
        let outcome = use("exchange") { (c) throws(RedisError) -> ExchangeClaim in
            func moved() throws(RedisError) -> ExchangeClaim? {
                guard case .string(let v) = try c.command(["GET", refreshKey]) else { return .superseded(nil) }
                let shared = self.keys.openRefresh(v, under: refreshKey)
                return shared?.refreshToken == current.refreshToken ? nil : .superseded(shared)
            }
            if let claim = try moved() { return claim }
            guard let lease = try self.lock(name, connection: c) else { return .busy }
            if let claim = try moved() {
                try c.command([
                    "EVAL", ClusterKeys.releaseScript, "1", self.keys.lockKey(name), lease.value, self.keys.channel,
                    ClusterKeys.Notice.unlocked(name).text,
                ])
                return claim
            }
            return .exchange(lease)
        }
        if outcome == .busy { ProxyMetrics.active?.cluster(.lockWait) }
        done(outcome ?? .exchange(nil))
    }

    func finishExchange(
        _ current: TokenStateFile.StoredRefreshToken, exchanged: TokenStateFile.StoredRefreshToken,
        lease: TokenLease?
    ) -> Bool? {
        let name = keys.exchangeName(fingerprint: current.fingerprint)
        let refreshKey = keys.refreshKey(fingerprint: current.fingerprint)
        guard let value = keys.seal(exchanged, under: refreshKey) else { return nil }
        let written = use("exchange") { (c) throws(RedisError) -> Bool in
            let r = try c.command([
                "EVAL", ClusterKeys.exchangeScript, "2", self.keys.lockKey(name), refreshKey,
                self.keys.digest(current.refreshToken) + ".", lease?.value ?? "", value,
                String(self.refreshTTL(exchanged) ?? 0), self.keys.channel, ClusterKeys.Notice.signIn.text,
            ])
            return r == .integer(1)
        }
        if written == true { ProxyMetrics.active?.cluster(.publish) }
        return written
    }

    func abandonExchange(_ current: TokenStateFile.StoredRefreshToken, lease: TokenLease) {
        let name = keys.exchangeName(fingerprint: current.fingerprint)
        _ = use("release") { (c) throws(RedisError) in
            try c.command([
                "EVAL", ClusterKeys.releaseScript, "1", self.keys.lockKey(name), lease.value, self.keys.channel,
                ClusterKeys.Notice.unlocked(name).text,
            ])
        }
    }

    // MARK: - notices

    /// The notice connection is (again) subscribed: whatever was published while it was down is lost, so the waits
    /// look at Redis now, and sign-ins are checked.
    private func resubscribed() {
        // The notice connection just reached Redis: the commands' connection need not wait out its backoff.
        // The commands' connection may be the one that died with the notices' (a dead socket is found by using
        // it, which closes it): then once more, on a new connection.
        if use("reconnect", force: true, { (c) throws(RedisError) in try c.command(["PING"]) }) == nil {
            _ = use("reconnect", force: true) { (c) throws(RedisError) in try c.command(["PING"]) }
        }
        for name in Array(waits.keys) { recheck(name) }
        rereadHeld()
        observer?.sharedSignInChanged()
    }

    /// Withdrawals published while the notices could not arrive: each token this replica holds is looked up among
    /// the marks, and dropped here when another replica withdrew it meanwhile.
    private func rereadHeld() {
        guard let observer else { return }
        for (name, slot) in slots {
            guard let held = observer.heldToken(slot) else { continue }
            let digest = keys.digest(held.value)
            let withdrawn = use("re-read") { (c) throws(RedisError) -> Bool in
                try c.command(["EXISTS", self.keys.withdrawnKey(name, digest: digest)]) == .integer(1)
            }
            if withdrawn == true { observer.sharedTokenWithdrawn(slot) { self.keys.digest($0.value) == digest } }
        }
    }

    private func received(_ text: String) {
        ProxyMetrics.active?.cluster(.receive)
        switch ClusterKeys.Notice.parse(text) {
        case .written(let name), .unlocked(let name):
            recheck(name)
        case .withdrawn(let name, let digest):
            if let slot = slots[name] {
                observer?.sharedTokenWithdrawn(slot) { self.keys.digest($0.value) == digest }
            }
            recheck(name)
        case .signIn:
            observer?.sharedSignInChanged()
        case nil:
            break
        }
    }

    // MARK: - the connection

    /// Runs `body` on the connection (opened first when needed): its result, or nil when Redis cannot be used now
    /// (down and backing off, or this operation failed). Every outcome updates ``health``; a change is logged once.
    private func use<T>(_ what: String, force: Bool = false, _ body: (RedisConnection) throws(RedisError) -> T) -> T? {
        let now = clock.nowMillis()
        guard force || health.mayTry(at: now) else { return nil }
        do throws(RedisError) {
            if !connection.isOpen { try connection.open() }
            let r = try body(connection)
            if health.succeeded() { changed(nil) }
            return r
        } catch {
            ProxyMetrics.active?.clusterError("\(error.kind)")
            if error.kind != .server { connection.close() }
            if health.failed(error, at: now) { changed(error) }
            return nil
        }
    }

    private func changed(_ error: RedisError?) {
        ProxyMetrics.active?.clusterConnected(error == nil)
        let now = clock.nowMillis()
        status.withLock {
            $0.connected = error == nil
            $0.problem = error?.message
            $0.since = now
        }
        if let error {
            var meta: Logger.Metadata = ["redis": "\(config.endpoint.redacted)", "cause": "\(error.message)"]
            meta["retry_in_s"] = "\(max(1, ((health.retryAt ?? now) - now) / 1000))"
            let line: Logger.Message =
                "Redis cannot be used: this replica works on its own (its memory and state file) until it can"
            if config.required { logger.error(line, metadata: meta) } else { logger.warning(line, metadata: meta) }
        } else {
            logger.notice(
                "Redis connected: tokens are shared with the fleet", metadata: ["redis": "\(config.endpoint.redacted)"])
        }
    }
}

/// What `/readyz` and the status page say about `[cluster]`.
public struct ClusterStatus: Sendable, Equatable {
    /// The Redis URL without user or password.
    public var redis: String
    public var required: Bool
    public var connected = false
    /// Why not, when not.
    public var problem: String? = "not connected yet"
    /// When the state last changed (milliseconds since the epoch).
    public var since: Int64 = 0
}
