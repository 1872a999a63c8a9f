/// The keys of the limits that protect upstreams: `[[upstream]]` entries, and a credential's `max_concurrent`,
/// `max_queued`, `queue_timeout_seconds` and `daily_quota`.
extension ConfigLoader {
    /// `[[upstream]] host = "gis.example.com" port = 443 max_concurrent = 8 max_queued = 100 queue_timeout_seconds = 30`
    static func parseUpstreamLimits(_ entries: [TableReader]) throws(ConfigError) -> [UpstreamHostLimit] {
        var result: [UpstreamHostLimit] = []
        for var entry in entries {
            guard let raw = try entry.string("host") else {
                throw ConfigError(
                    key: entry.path + ".host", line: entry.table.line,
                    "[[upstream]] needs host, e.g. host = \"gis.example.com\" (and max_concurrent)")
            }
            let trimmed = raw.hasPrefix("[") && raw.hasSuffix("]") ? String(raw.dropFirst().dropLast()) : raw
            guard let host = hostName(trimmed) ?? (IPAddress.parse(trimmed).map { _ in trimmed.lowercased() }) else {
                throw ConfigError(
                    key: entry.path + ".host", line: entry.line(of: "host"),
                    "\(entry.shown("host", raw)) is not a host name or IP address like gis.example.com (no scheme, port or path: the port is its own key)"
                )
            }
            let port = try entry.int("port", range: 1...65535)
            guard let limit = try parseConcurrency(&entry) else {
                throw ConfigError(
                    key: entry.path + ".max_concurrent", line: entry.table.line,
                    "[[upstream]] \(host) needs max_concurrent, e.g. max_concurrent = 8")
            }
            try entry.finish()
            let u = UpstreamHostLimit(host: host, port: port, concurrency: limit, line: entry.table.line)
            if let same = result.first(where: { $0.host == u.host && $0.port == u.port }) {
                throw ConfigError(
                    key: entry.path + ".host", line: entry.line(of: "host"),
                    "duplicate [[upstream]] \(u.label) (also at line \(same.line.map { "\($0)" } ?? "?"))")
            }
            result.append(u)
        }
        return result
    }

    /// A credential's `max_concurrent` (with `max_queued`, `queue_timeout_seconds`) and `daily_quota`.
    static func parseCredentialLimits(_ entry: inout TableReader) throws(ConfigError) -> CredentialLimits {
        var limits = CredentialLimits()
        limits.concurrency = try parseConcurrency(&entry)
        limits.dailyQuota = try entry.int("daily_quota", range: 1...1_000_000_000)
        return limits
    }

    /// `max_concurrent`, `max_queued` and `queue_timeout_seconds` of `entry`; nil without `max_concurrent` (the
    /// other two alone are an error: they would do nothing).
    private static func parseConcurrency(_ entry: inout TableReader) throws(ConfigError) -> ConcurrencyLimit? {
        let max = try entry.int("max_concurrent", range: 1...100_000)
        let queued = try entry.int("max_queued", range: 0...1_000_000)
        let timeout = try entry.int("queue_timeout_seconds", range: 1...3600)
        guard let max else {
            if queued != nil || timeout != nil {
                let k = queued != nil ? "max_queued" : "queue_timeout_seconds"
                throw ConfigError(
                    key: entry.path + "." + k, line: entry.line(of: k),
                    "\(k) needs max_concurrent (the queue is for requests past max_concurrent)")
            }
            return nil
        }
        return ConcurrencyLimit(
            maxConcurrent: max, maxQueued: queued ?? ConcurrencyLimit.defaultMaxQueued,
            queueTimeoutSeconds: timeout ?? ConcurrencyLimit.defaultQueueTimeoutSeconds)
    }
}
