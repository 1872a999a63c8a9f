import Logging

/// The live state that belongs to the process, not to one configuration: every ``ServerContext`` generation
/// points at the same instance, so a reload never resets what is counted here. Connections give back the
/// slot they took from the one ``ConnectionLimiter`` whatever generation is current when they close; rate
/// limit buckets keep their levels; the "logged once" keys and the descriptor-exhaustion throttle keep theirs.
/// (Anything else process-wide that a generation should reach, such as metrics, belongs here too.)
///
/// Every member is itself thread-safe (locks or atomics inside).
final class SharedServerState: Sendable {
    /// Open client connections, in total and per address (limits updated in place by a reload).
    let connections: ConnectionLimiter
    let rateLimiter = RateLimiter()
    /// `daily_quota` counts per credential.
    let dailyQuotas = DailyQuotas()
    /// The concurrency caps and their queues (configured by each generation's ``AccessControl``).
    let upstreamLimiter = UpstreamLimiter()
    /// Throttles the log lines of refused connections, proxy-auth failures and rate limits.
    let throttle = LogThrottle()
    /// Hosts already reported as "matched but not interceptable" (logged once each).
    let notices = OnceSet()
    /// Running out of file descriptors: counted, logged (rate-limited), and the listeners' pause.
    let descriptors = DescriptorExhaustion()
    /// The parent proxies' failover state and counts, kept across reloads.
    let parents = ParentHealth(backoffSeconds: 30)
    /// `upstream_pac`: the PAC file in force and its answers, kept across reloads.
    let pac = PacResolver()
    /// The JWKS of the issuers `[[app]]` sign-in trusts, kept across reloads.
    let signInKeys = SignInKeys()
    /// `1.1 authproxy-<8 hex>`, random per process (``ServerContext/viaValue``).
    let viaValue: String = {
        var g = SystemRandomNumberGenerator()
        let id = String(UInt32.random(in: 0...UInt32.max, using: &g), radix: 16)
        return "1.1 authproxy-" + String(repeating: "0", count: 8 - id.count) + id
    }()

    /// `[cluster]`: the limits the replicas count together in Redis (nil without `[cluster]`; changing it needs
    /// a restart, like the token store's).
    let fleet: FleetLimiter?

    init(config: ProxyConfig, logger: Logger = Logger(label: "authproxy")) {
        connections = ConnectionLimiter(
            total: config.maxConnections, perClient: config.effectiveMaxConnectionsPerClient)
        if let cluster = config.cluster, let stateKey = config.stateKey,
            let keys = ClusterKeys(stateKey: stateKey, prefix: cluster.keyPrefix)
        {
            fleet = FleetLimiter(config: cluster, keys: keys, logger: logger)
        } else {
            fleet = nil
        }
    }
}
