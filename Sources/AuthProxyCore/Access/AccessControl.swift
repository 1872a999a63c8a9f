/// Who may use the proxy and how much, built from one configuration generation and shared by the listeners and
/// every event loop: the client address allow-list, proxy authentication, per-client credential scopes, rate
/// limits, connection limits and denied destinations. Immutable apart from the limiters, which lock internally
/// and belong to the process (``SharedServerState``): a reload builds a new `AccessControl` around the same ones.
final class AccessControl: Sendable {
    let allowClients: [AddressBlock]
    let denyDestinations: [AddressBlock]
    let authenticator: ProxyAuthenticator
    let connections: ConnectionLimiter
    let rateLimiter: RateLimiter
    let throttle: LogThrottle
    /// Every credential; what clients without a scope use.
    let all: CredentialStore
    private let scoped: [String: CredentialStore]
    /// `[[app]]`: which credentials each web app on `/proxy` may use.
    let apps: WebAppAccess
    /// Whether any credential has a `rate_limit` (so the per-request check can be skipped when none does).
    let hasRateLimits: Bool
    /// `max_concurrent` of `[[upstream]]` hosts and credentials (``UpstreamLimiter``).
    let caps: ConcurrencyCaps

    init(config: ProxyConfig, shared: SharedServerState) {
        allowClients = config.allowClients
        denyDestinations = config.denyDestinations
        authenticator = ProxyAuthenticator(config.clients)
        connections = shared.connections
        rateLimiter = shared.rateLimiter
        throttle = shared.throttle
        all = CredentialStore(config.credentials)
        var scoped: [String: CredentialStore] = [:]
        for c in config.clients {
            if let names = c.credentials {
                scoped[c.name] = CredentialStore(config.credentials.filter { names.contains($0.name) })
            }
        }
        self.scoped = scoped
        apps = WebAppAccess(apps: config.apps, credentials: config.credentials)
        hasRateLimits = config.credentials.contains { $0.rateLimit != nil || $0.limits.dailyQuota != nil }
        caps = ConcurrencyCaps(upstreams: config.upstreamLimits, credentials: config.credentials)
        shared.upstreamLimiter.configure(caps.all)
    }

    /// The credentials `client` may use: its scope, or all of them.
    func store(for client: ProxyClient?) -> CredentialStore {
        guard let client else { return all }
        return scoped[client.name] ?? all
    }
}
