/// Per-credential activity for the status page, kept as plain values (``ProxyMetrics`` holds it under a lock):
/// requests, token rejections and rate-limit hits in the last five minutes, the last token request and its
/// outcome, and network-authentication outcomes by scheme. Memory is bounded by the number of credential names
/// seen (credentials come from the configuration, never from clients).
struct CredentialActivity: Sendable, Equatable {
    struct NetworkAuthOutcome: Sendable, Equatable, Codable {
        var scheme: String
        var successes = 0
        var failures = 0
        /// Milliseconds since the epoch of the last outcome, and whether it succeeded.
        var lastAt: Int64 = 0
        var lastSucceeded = false
    }

    struct PerCredential: Sendable, Equatable {
        var requests = ActivityWindow()
        var rejections = ActivityWindow()
        var rateLimited = ActivityWindow()
        var rateLimitedTotal = 0
        var lastTokenRequestAt: Int64? = nil
        var lastTokenRequestSucceeded = false
        var networkAuth: [String: NetworkAuthOutcome] = [:]
    }

    private(set) var credentials: [String: PerCredential] = [:]

    init() {}

    mutating func request(credential: String, now: Int64) {
        credentials[credential, default: PerCredential()].requests.add(now: now)
    }

    mutating func rejected(credential: String, now: Int64) {
        credentials[credential, default: PerCredential()].rejections.add(now: now)
    }

    mutating func rateLimited(credential: String, now: Int64) {
        credentials[credential, default: PerCredential()].rateLimited.add(now: now)
        credentials[credential, default: PerCredential()].rateLimitedTotal += 1
    }

    mutating func tokenRequest(credential: String, success: Bool, now: Int64) {
        credentials[credential, default: PerCredential()].lastTokenRequestAt = now
        credentials[credential, default: PerCredential()].lastTokenRequestSucceeded = success
    }

    mutating func networkAuth(credential: String, scheme: String, success: Bool, now: Int64) {
        var o =
            credentials[credential, default: PerCredential()].networkAuth[scheme] ?? NetworkAuthOutcome(scheme: scheme)
        if success { o.successes += 1 } else { o.failures += 1 }
        o.lastAt = now
        o.lastSucceeded = success
        credentials[credential, default: PerCredential()].networkAuth[scheme] = o
    }

    func of(_ credential: String) -> PerCredential { credentials[credential] ?? PerCredential() }
}
