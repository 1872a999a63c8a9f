/// A limit the replicas of a `[cluster]` fleet share through Redis: a credential's `rate_limit` with `scope =
/// "credential"` (a fixed window of `per_seconds`), or its `daily_quota` (a window of one UTC day). Pure: the
/// arithmetic of leases and shares, tested with values.
///
/// The window is fixed and aligned on Redis's clock (window `n` covers `[n × seconds, (n + 1) × seconds)` since
/// the epoch; for a day, the UTC day), so every replica counts into the same window without trusting its own
/// clock. A fixed window allows `requests` per window, not per any interval of that length: a burst at the end of
/// one window and another at the start of the next can bring up to twice the limit within `per_seconds`.
struct FleetLimit: Hashable, Sendable {
    enum Kind: String, Sendable {
        /// `rate_limit` with `scope = "credential"`.
        case rate
        /// `daily_quota`.
        case daily
    }

    var credential: String
    var kind: Kind
    /// Requests allowed per window, the whole fleet together.
    var requests: Int
    var windowSeconds: Int

    static func rate(_ credential: String, _ limit: RateLimit) -> FleetLimit {
        FleetLimit(credential: credential, kind: .rate, requests: limit.requests, windowSeconds: limit.perSeconds)
    }

    static func daily(_ credential: String, quota: Int) -> FleetLimit {
        FleetLimit(credential: credential, kind: .daily, requests: quota, windowSeconds: 86_400)
    }

    var windowMillis: Int64 { Int64(windowSeconds) * 1000 }

    /// What one replica may allow per window while Redis cannot be used: the limit divided by the fleet's size,
    /// rounded down (so the replicas together stay within it; a limit below the number of replicas allows none).
    func share(replicas: Int) -> Int { requests / max(1, replicas) }

    /// What is left of the limit for one replica in the window whose fleet count was last seen at `used`.
    func share(replicas: Int, afterFleetUsed used: Int) -> Int { max(0, requests - used) / max(1, replicas) }

    /// How many permits a replica leases at once when it has none: a tenth of its share, between 1 and 100.
    /// Bigger batches save Redis round trips; every permit leased and not spent is lost to the fleet for the
    /// rest of the window (unless given back), so together the replicas can strand at most a tenth of the limit.
    func batch(replicas: Int) -> Int { min(100, max(1, requests / (max(1, replicas) * 10))) }
}

extension Credential {
    /// The limits of this credential the replicas count together under `[cluster]`.
    var fleetLimits: [FleetLimit] {
        var out: [FleetLimit] = []
        if let r = rateLimit, r.scope == .credential { out.append(.rate(name, r)) }
        if let q = limits.dailyQuota { out.append(.daily(name, quota: q)) }
        return out
    }

    /// Whether it has a limit the fleet shares (``fleetLimits``).
    var sharedByFleet: Bool { (rateLimit?.scope == .credential) || limits.dailyQuota != nil }
}
