import Dispatch
import Logging
import Synchronization

/// `[cluster]`: the `rate_limit`s with `scope = "credential"` and the `daily_quota`s of the fleet's credentials,
/// counted once for all replicas in Redis.
///
/// A request spends a permit this replica leased (``FleetWindow``): no Redis round trip. With none left, the
/// exchange waits, parked like a request waiting for a concurrency slot or a token (no thread blocked), while
/// this limiter's queue leases a batch from the window's counter with one script (``ClusterKeys/leaseScript``);
/// requests that arrive meanwhile wait for the same lease, which asks for as many permits as wait. Every Redis
/// operation is bounded by `[cluster] timeout_ms`; when one fails the replica enforces its share
/// (limit ÷ `replicas`) until a lease succeeds again (after ``ClusterHealth``'s backoff), and says so once per
/// change: a warning when it starts, a notice when the fleet's count is back, `/status.json` and
/// `authproxy_cluster_limits_fallback`.
///
/// Ownership: the windows, the waiting requests and the health are under ``state`` (taken briefly by event loops
/// and by the queue); the connection is used on ``queue`` only. Callbacks run outside the lock.
final class FleetLimiter: @unchecked Sendable {
    let replicas: Int
    private let keys: ClusterKeys
    private let endpoint: String
    private let queue: DispatchQueue
    private let connection: RedisConnection
    private let clock: any WallClock
    private let logger: Logger
    private let state = Mutex(State())

    private struct State {
        var windows: [FleetLimit: FleetWindow] = [:]
        var waiting: [FleetLimit: [Waiter]] = [:]
        var leasing: Set<FleetLimit> = []
        /// Limits with a give-back check scheduled (``scheduleGiveBack(_:)``).
        var watched: Set<FleetLimit> = []
        var health = ClusterHealth()
        /// Each replica enforces its share (the last lease failed).
        var fallback = false
        var since: Int64 = 0
        var cause: String? = nil
    }

    enum Decision: Sendable, Equatable {
        case allowed
        /// `share`: this replica's share per window when the refusal comes from the fallback.
        case limited(retryAfterSeconds: Int, share: Int?)
    }

    /// A request waiting for a lease: told the decision, and whether this replica's share made it (Redis could
    /// not be used) rather than the fleet's count.
    typealias Waiter = @Sendable (_ decision: Decision, _ byShare: Bool) -> Void

    enum Outcome: Sendable, Equatable {
        case decided(Decision)
        /// The callback will say (from this limiter's queue).
        case pending
    }

    init(config: ClusterConfig, keys: ClusterKeys, logger: Logger, clock: any WallClock = SystemWallClock()) {
        replicas = config.replicas ?? 1
        self.keys = keys
        endpoint = config.endpoint.redacted
        connection = RedisConnection(endpoint: config.endpoint, timeoutMillis: config.timeoutMillis)
        self.clock = clock
        self.logger = logger
        queue = ProxyQueue.ownThread("authproxy.fleet-limits")
        ProxyMetrics.active?.clusterLimitsFallback(false)
    }

    /// Spends one request of `limit` at `now` (wall-clock milliseconds): decided at once from the permits held
    /// (or the fallback share), or `.pending` and `whenDecided` is called once a lease came back.
    func take(_ limit: FleetLimit, now: Int64, whenDecided: @escaping Waiter) -> Outcome {
        let (step, startLease) = state.withLock { s -> (FleetWindow.Step, Bool) in
            var w = s.windows[limit] ?? FleetWindow(limit: limit)
            let step = w.take(now: now, redisUsable: s.health.mayTry(at: now), replicas: replicas)
            s.windows[limit] = w
            guard step == .lease else { return (step, false) }
            s.waiting[limit, default: []].append(whenDecided)
            return (step, s.leasing.insert(limit).inserted)
        }
        if startLease { queue.async { self.lease(limit) } }
        switch step {
        case .allowed: return .decided(.allowed)
        case .limited(let wait, let share): return .decided(.limited(retryAfterSeconds: wait, share: share))
        case .lease: return .pending
        }
    }

    /// One lease for the requests waiting on `limit`, then their decisions; again while more wait.
    private func lease(_ limit: FleetLimit) {
        let sentAt = clock.nowMillis()
        let request = state.withLock { s in
            (s.windows[limit] ?? FleetWindow(limit: limit)).leaseRequest(
                waiting: s.waiting[limit]?.count ?? 0, replicas: replicas)
        }
        let result = run { c throws(RedisError) -> FleetWindow.LeaseResult in
            let reply = try c.command([
                "EVAL", ClusterKeys.leaseScript, "1", self.keys.limitKey(limit), String(limit.requests),
                String(limit.windowSeconds), String(request.want), String(request.carry), String(request.carryWindow),
            ])
            guard let r = FleetWindow.LeaseResult(reply) else {
                throw RedisError(.protocolError, "unexpected answer to the fleet's lease script: \(reply)")
            }
            return r
        }
        let now = clock.nowMillis()
        var decided: [(Waiter, Decision)] = []
        var byShare = false
        var again = false
        var change: (fallback: Bool, cause: String?)? = nil
        state.withLock { s in
            var w = s.windows[limit] ?? FleetWindow(limit: limit)
            switch result {
            case .success(let r):
                _ = s.health.succeeded()
                w.leased(r, sentAt: sentAt, carried: request.carry)
                if s.fallback {
                    s.fallback = false
                    s.since = now
                    s.cause = nil
                    change = (false, nil)
                }
            case .failure(let e):
                _ = s.health.failed(e, at: now)
                if !s.fallback {
                    s.fallback = true
                    s.since = now
                    change = (true, e.message)
                }
                s.cause = e.message
            }
            let usable = s.health.mayTry(at: now)
            byShare = !usable
            var still: [Waiter] = []
            for callback in s.waiting[limit] ?? [] {
                switch w.take(now: now, redisUsable: usable, replicas: replicas) {
                case .allowed: decided.append((callback, .allowed))
                case .limited(let wait, let share):
                    decided.append((callback, .limited(retryAfterSeconds: wait, share: share)))
                case .lease: still.append(callback)
                }
            }
            s.windows[limit] = w
            if still.isEmpty {
                s.waiting[limit] = nil
                s.leasing.remove(limit)
            } else {
                s.waiting[limit] = still
                again = true
            }
        }
        if case .success = result {
            ProxyMetrics.active?.cluster(.limitLease)
            scheduleGiveBack(limit)
        }
        if let change { announce(fallback: change.fallback, cause: change.cause) }
        for (callback, d) in decided { callback(d, byShare) }
        if again { queue.async { self.lease(limit) } }
    }

    /// How long leased permits may sit unspent before they go back to the fleet.
    static let idleMillis: Int64 = 2000

    /// Looks at `limit`'s permits every ``idleMillis`` while it holds some, and gives back those unspent for that
    /// long: a replica that leased a batch and then saw no more requests does not keep the fleet's permits until
    /// the window ends.
    private func scheduleGiveBack(_ limit: FleetLimit) {
        let schedule = state.withLock { s in
            (s.windows[limit]?.holdsPermits ?? false) && s.watched.insert(limit).inserted
        }
        guard schedule else { return }
        queue.asyncAfter(deadline: .now() + .milliseconds(Int(Self.idleMillis))) { self.giveBack(limit) }
    }

    private func giveBack(_ limit: FleetLimit) {
        let now = clock.nowMillis()
        let idle = state.withLock { s -> (count: Int, window: Int64)? in
            s.watched.remove(limit)
            // Without Redis the permits held are what this replica may still spend (Redis counted them).
            guard !s.fallback, s.health.mayTry(at: now), !s.leasing.contains(limit), var w = s.windows[limit] else {
                return nil
            }
            let r = w.releaseIdle(now: now, idleMillis: Self.idleMillis)
            s.windows[limit] = w
            return r
        }
        guard let idle else {
            scheduleGiveBack(limit)
            return
        }
        _ = run { c throws(RedisError) in
            try c.command([
                "EVAL", ClusterKeys.giveBackScript, "1", self.keys.limitKey(limit), String(idle.count),
                String(limit.windowSeconds), String(idle.window),
            ])
        }
    }

    private func run<T>(_ body: (RedisConnection) throws(RedisError) -> T) -> Result<T, RedisError> {
        do throws(RedisError) {
            if !connection.isOpen { try connection.open() }
            return .success(try body(connection))
        } catch {
            ProxyMetrics.active?.clusterError("\(error.kind)")
            if error.kind != .server { connection.close() }
            return .failure(error)
        }
    }

    private func announce(fallback: Bool, cause: String?) {
        ProxyMetrics.active?.clusterLimitsFallback(fallback)
        if fallback {
            logger.warning(
                "Redis cannot be used for the fleet's limits: this replica enforces its share (each limit ÷ replicas) until it can",
                metadata: ["redis": "\(endpoint)", "replicas": "\(replicas)", "cause": "\(cause ?? "")"])
        } else {
            logger.notice(
                "Redis reachable again: the fleet's limits are counted together again",
                metadata: ["redis": "\(endpoint)"])
        }
    }

    // MARK: - status

    /// The state for `/status.json`: whether each replica enforces its share, since when, and why.
    struct Status: Sendable, Equatable {
        var fallback: Bool
        var since: Int64
        var cause: String?
        var replicas: Int
    }

    var status: Status {
        state.withLock { Status(fallback: $0.fallback, since: $0.since, cause: $0.cause, replicas: replicas) }
    }

    /// Requests counted in the current window of `limit` as far as this replica knows, nil before its first.
    func used(_ limit: FleetLimit, now: Int64) -> Int? {
        state.withLock { s in s.windows[limit]?.used(now: now) }
    }
}
