/// `max_concurrent`, `max_queued` and `queue_timeout_seconds` of a `[[credential]]` or an `[[upstream]]`: how many
/// requests may be open against it at once, and how many more may wait, each for how long.
public struct ConcurrencyLimit: Sendable, Equatable {
    public var maxConcurrent: Int
    public var maxQueued: Int
    public var queueTimeoutSeconds: Int

    public static let defaultMaxQueued = 100
    public static let defaultQueueTimeoutSeconds = 30

    public init(
        maxConcurrent: Int, maxQueued: Int = Self.defaultMaxQueued,
        queueTimeoutSeconds: Int = Self.defaultQueueTimeoutSeconds
    ) {
        self.maxConcurrent = maxConcurrent
        self.maxQueued = maxQueued
        self.queueTimeoutSeconds = queueTimeoutSeconds
    }
}

/// `[[upstream]]`: limits on one upstream host (and port, when given), whatever credential or none applies.
public struct UpstreamHostLimit: Sendable, Equatable {
    /// Lowercase host name or IP literal, as in the request URL.
    public var host: String
    /// nil: every port of the host.
    public var port: Int?
    public var concurrency: ConcurrencyLimit
    public var line: Int?

    public init(host: String, port: Int? = nil, concurrency: ConcurrencyLimit, line: Int? = nil) {
        self.host = host
        self.port = port
        self.concurrency = concurrency
        self.line = line
    }

    /// The name it has in `/status.json`, metrics and logs: `host` or `host:port`.
    public var label: String { port.map { "\(host):\($0)" } ?? host }
}

/// The limits of a credential besides `rate_limit`: a concurrency cap and a daily quota.
public struct CredentialLimits: Sendable, Equatable {
    public var concurrency: ConcurrencyLimit? = nil
    /// Requests per UTC day, all clients and (with `[cluster]`) all replicas together.
    public var dailyQuota: Int? = nil

    public init(concurrency: ConcurrencyLimit? = nil, dailyQuota: Int? = nil) {
        self.concurrency = concurrency
        self.dailyQuota = dailyQuota
    }
}
