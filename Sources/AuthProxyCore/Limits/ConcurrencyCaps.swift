/// The concurrency caps of one configuration generation, looked up per request: `[[upstream]]` entries by host (an
/// entry with a port before the host's entry without one) and the credentials with `max_concurrent`.
struct ConcurrencyCaps: Sendable {
    private var hosts: [String: [(port: Int?, key: UpstreamLimiter.Key)]] = [:]
    /// Credential name → its cap.
    private(set) var credentials: [String: ConcurrencyLimit] = [:]
    /// Every cap, as the limiter is configured with it.
    private(set) var all: [UpstreamLimiter.Key: ConcurrencyLimit] = [:]

    init(upstreams: [UpstreamHostLimit], credentials: [Credential]) {
        for u in upstreams {
            let key = UpstreamLimiter.Key(scope: .host, name: u.label)
            hosts[u.host, default: []].append((u.port, key))
            all[key] = u.concurrency
        }
        for (host, entries) in hosts {
            hosts[host] = entries.sorted { ($0.port == nil ? 1 : 0) < ($1.port == nil ? 1 : 0) }
        }
        for c in credentials {
            if let limit = c.limits.concurrency {
                self.credentials[c.name] = limit
                all[UpstreamLimiter.Key(scope: .credential, name: c.name)] = limit
            }
        }
    }

    var isEmpty: Bool { all.isEmpty }

    /// The cap of requests to `host` (as in the URL, lowercase) on `port`, if one is configured.
    func host(_ host: String, port: Int) -> UpstreamLimiter.Key? {
        guard let entries = hosts[host] ?? hosts[host.lowercased()] else { return nil }
        return entries.first { $0.port == nil || $0.port == port }?.key
    }

    func limit(of key: UpstreamLimiter.Key) -> ConcurrencyLimit? { all[key] }
}
