extension StatusReport {
    /// One limit that protects an upstream: a concurrency cap (`scope` `host` or `credential`) with its open and
    /// queued requests, or a credential's `rate_limit` / `daily_quota`.
    public struct Limit: Codable, Sendable, Equatable {
        /// `host` (an `[[upstream]]`) or `credential`.
        public var scope: String
        public var name: String
        public var maxConcurrent: Int? = nil
        public var maxQueued: Int? = nil
        public var open: Int? = nil
        public var queued: Int? = nil
        /// Requests refused 503 since the start: the queue was full, or they waited their timeout.
        public var refusedQueueFull: UInt64? = nil
        public var refusedQueueTimeout: UInt64? = nil
        /// `rate_limit` as `N/Ss`, and whose budget it is (`client` or `credential`).
        public var rateLimit: String? = nil
        public var rateLimitScope: String? = nil
        public var dailyQuota: Int? = nil
        /// Under `[cluster]`: the fleet's count as of this replica's last lease, plus what it allowed on its own since.
        public var dailyQuotaUsed: Int? = nil
        /// Under `[cluster]`, for the fleet-wide limits: `fleet` (counted in Redis) or `share` (this replica's
        /// share while Redis cannot be used), with that share per window, and the current rate window's count.
        public var fleet: String? = nil
        public var rateLimitShare: Int? = nil
        public var dailyQuotaShare: Int? = nil
        public var rateLimitUsed: Int? = nil
    }

    static func limits(
        _ caps: [UpstreamLimiter.Snapshot], credentials: [AuthProxyCore.Credential], quotas: DailyQuotas,
        fleet: FleetLimiter? = nil
    ) -> [Limit] {
        var out: [Limit] = []
        var byCredential: [String: Int] = [:]
        for s in caps {
            out.append(
                Limit(
                    scope: s.key.scope.rawValue, name: s.key.name, maxConcurrent: s.limit.maxConcurrent,
                    maxQueued: s.limit.maxQueued, open: s.open, queued: s.queued,
                    refusedQueueFull: s.refused[.queueFull] ?? 0, refusedQueueTimeout: s.refused[.queueTimeout] ?? 0))
            if s.key.scope == .credential { byCredential[s.key.name] = out.count - 1 }
        }
        let today = nowMillis() / 1000
        for c in credentials where c.rateLimit != nil || c.limits.dailyQuota != nil {
            var l: Limit
            if let i = byCredential[c.name] { l = out[i] } else { l = Limit(scope: "credential", name: c.name) }
            if let r = c.rateLimit {
                l.rateLimit = "\(r.requests)/\(r.perSeconds)s"
                l.rateLimitScope = r.scope.rawValue
            }
            if let q = c.limits.dailyQuota {
                l.dailyQuota = q
                l.dailyQuotaUsed = quotas.used(credential: c.name, now: today)
            }
            if let fleet, c.sharedByFleet {
                let fallback = fleet.status.fallback
                let now = nowMillis()
                l.fleet = fallback ? "share" : "fleet"
                for f in c.fleetLimits {
                    let used = fleet.used(f, now: now) ?? 0
                    let share = fallback ? f.share(replicas: fleet.replicas) : nil
                    switch f.kind {
                    case .rate:
                        l.rateLimitUsed = used
                        l.rateLimitShare = share
                    case .daily:
                        l.dailyQuotaUsed = used
                        l.dailyQuotaShare = share
                    }
                }
            }
            if let i = byCredential[c.name] { out[i] = l } else { out.append(l) }
        }
        return out
    }
}
