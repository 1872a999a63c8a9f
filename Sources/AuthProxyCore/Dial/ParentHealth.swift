import Dispatch

/// The process-wide record of the parent proxies: their failover state (``ParentFailover``) and what they
/// carried, for metrics and the status page. Shared by every event loop, the token service and reloads (a
/// reload keeps a parent's backoff and counts), so it is locked; each call holds the lock for a few dictionary
/// operations.
final class ParentHealth: @unchecked Sendable {
    struct Stats: Sendable {
        var requests: UInt64 = 0
        var failures: [ParentFailover.Cause: UInt64] = [:]
    }

    private let lock = Lock()
    private var failover: ParentFailover
    private var stats: [ParentProxy: Stats] = [:]
    /// The schemes each parent's last 407 offered (lower-cased), for ``basicOnly(_:)``.
    private var offers: [ParentProxy: Set<String>] = [:]
    private let now: @Sendable () -> UInt64

    init(
        backoffSeconds: Int,
        now: @escaping @Sendable () -> UInt64 = { DispatchTime.now().uptimeNanoseconds / 1_000_000 }
    ) {
        failover = ParentFailover(backoffSeconds: backoffSeconds)
        self.now = now
    }

    /// A reload with another `upstream_proxy_backoff_seconds`: parents now in backoff keep theirs.
    func setBackoff(seconds: Int) {
        lock.withLock {
            let fresh = ParentFailover(backoffSeconds: seconds)
            if fresh.backoffMillis != failover.backoffMillis { failover = fresh }
        }
    }

    func order(_ candidates: [ParentProxy]) -> [ParentProxy] {
        if candidates.count < 2 { return candidates }
        let t = now()
        return lock.withLock { failover.order(candidates, now: t) }
    }

    /// A request (or a tunnel, or a token fetch) goes to `p`.
    func attempted(_ p: ParentProxy) {
        lock.withLock { stats[p, default: Stats()].requests += 1 }
    }

    /// `p` carried it (answered, or established the tunnel): any backoff ends.
    func succeeded(_ p: ParentProxy) {
        lock.withLock { failover.succeeded(p) }
    }

    func failed(_ p: ParentProxy, cause: ParentFailover.Cause) {
        let t = now()
        lock.withLock {
            stats[p, default: Stats()].failures[cause, default: 0] += 1
            failover.failed(p, cause: cause, now: t)
        }
    }

    /// A 407 from `p` offered these schemes.
    func offered(_ p: ParentProxy, schemes: Set<String>) {
        lock.withLock { offers[p] = schemes }
    }

    /// Whether `p` offers Basic alone: then the credential is sent with the first request (libcurl sends Basic
    /// unasked only when it is the one scheme allowed), instead of every request first meeting a 407.
    func basicOnly(_ p: ParentProxy) -> Bool {
        lock.withLock { offers[p] == ["basic"] }
    }

    struct Snapshot: Sendable {
        var parent: ParentProxy
        var stats: Stats
        var inBackoff: Bool
    }

    /// Every parent in `configured` (in that order) and any other that carried traffic (a PAC file's).
    func snapshot(configured: [ParentProxy]) -> [Snapshot] {
        let t = now()
        return lock.withLock {
            var out = configured.map {
                Snapshot(parent: $0, stats: stats[$0] ?? Stats(), inBackoff: failover.inBackoff($0, now: t))
            }
            let listed = Set(configured)
            for (p, s) in stats where !listed.contains(p) {
                out.append(Snapshot(parent: p, stats: s, inBackoff: failover.inBackoff(p, now: t)))
            }
            return out
        }
    }
}
