/// The PAC file's answers per destination, so that a request whose destination was evaluated lately is routed
/// without going to the PAC engine. Pure (times are passed in); ``PacResolver`` keeps it under its lock.
///
/// Keyed by scheme, host and port: what `FindProxyForURL` is called with (the path is left out, see
/// ``PacResolver``). An answer lives `ttl` (a PAC may send a host elsewhere by time of day, or after its
/// `dnsResolve` changes); at most `capacity` are kept: a full cache first drops expired answers, then the
/// oldest. A new PAC file clears it (``clear()``).
public struct PacRouteCache: Sendable {
    public struct Key: Hashable, Sendable {
        public var scheme: String
        public var host: String
        public var port: Int

        public init(scheme: String, host: String, port: Int) {
            self.scheme = scheme
            self.host = host
            self.port = port
        }
    }

    /// What the PAC file said for a destination: its directive, or why it could not say (the script threw,
    /// returned no string): kept as long, so a broken rule is not evaluated again for every request.
    public enum Answer: Equatable, Sendable {
        case directive(PacDirective)
        case failed(String)
    }

    public let ttlMillis: UInt64
    public let capacity: Int
    private var entries: [Key: (answer: Answer, at: UInt64)] = [:]

    public init(ttlSeconds: Int = 60, capacity: Int = 4096) {
        ttlMillis = UInt64(max(1, ttlSeconds)) * 1000
        self.capacity = max(1, capacity)
    }

    public var count: Int { entries.count }

    /// The answer for `key` if it is younger than the TTL at `now` (ms).
    public func answer(_ key: Key, now: UInt64) -> Answer? {
        guard let e = entries[key], now &- e.at < ttlMillis else { return nil }
        return e.answer
    }

    public mutating func insert(_ answer: Answer, for key: Key, now: UInt64) {
        if entries[key] == nil, entries.count >= capacity {
            entries = entries.filter { now &- $0.value.at < ttlMillis }
            if entries.count >= capacity, let oldest = entries.min(by: { $0.value.at < $1.value.at })?.key {
                entries[oldest] = nil
            }
        }
        entries[key] = (answer, now)
    }

    /// A new PAC file: every answer of the old one goes.
    public mutating func clear() {
        entries.removeAll(keepingCapacity: true)
    }
}
