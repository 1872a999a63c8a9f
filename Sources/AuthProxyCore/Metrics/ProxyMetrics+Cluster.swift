import CoreMetrics

/// `[cluster]`'s figures: how often the fleet's store served a token, made a replica wait for another's token
/// request, carried notices, and failed. Handles are made per event (they are cached by the factory).
extension ProxyMetrics {
    enum ClusterEvent: String, CaseIterable {
        /// A token request avoided: another replica's token was used.
        case sharedHit = "shared_hits"
        /// Nothing usable in the store: this replica (or the lock holder) fetches.
        case sharedMiss = "shared_misses"
        /// Another replica held the lock: this one waited for its token.
        case lockWait = "lock_waits"
        /// The wait ended without the other replica's token: this one fetched itself.
        case lockWaitTimeout = "lock_wait_timeouts"
        case publish = "publishes"
        case receive = "receives"
        /// Permits of a fleet-wide limit leased from Redis (one round trip, a batch of permits).
        case limitLease = "limit_leases"
    }

    func cluster(_ event: ClusterEvent) {
        CoreMetrics.Counter(label: "authproxy_cluster_\(event.rawValue)_total", dimensions: [], factory: factory)
            .increment()
    }

    /// A Redis operation failed (`cause`: ``RedisError/Kind``'s name).
    func clusterError(_ cause: String) {
        CoreMetrics.Counter(label: "authproxy_cluster_errors_total", dimensions: [("cause", cause)], factory: factory)
            .increment()
    }

    /// Whether Redis can be used now (1) or the replica works alone (0).
    func clusterConnected(_ up: Bool) {
        CoreMetrics.Gauge(label: "authproxy_cluster_connected", dimensions: [], factory: factory).record(up ? 1 : 0)
    }

    /// Whether this replica enforces its share of the fleet's limits (1: Redis cannot be used) or the fleet's
    /// count (0).
    func clusterLimitsFallback(_ on: Bool) {
        CoreMetrics.Gauge(label: "authproxy_cluster_limits_fallback", dimensions: [], factory: factory)
            .record(on ? 1 : 0)
    }
}
