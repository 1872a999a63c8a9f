/// `rate_limit = { requests = N, per_seconds = S, scope = "client" }` of a credential.
public struct RateLimit: Sendable, Equatable {
    public var requests: Int
    public var perSeconds: Int
    public var scope: Scope = .client

    /// Whose requests share one budget.
    public enum Scope: String, Sendable, CaseIterable {
        /// Each client (its `[[client]]` name, else its address) has its own.
        case client
        /// All clients together (and, with `[cluster]`, all replicas).
        case credential
    }

    public init(requests: Int, perSeconds: Int, scope: Scope = .client) {
        self.requests = requests
        self.perSeconds = perSeconds
        self.scope = scope
    }
}

/// A token bucket: holds up to `requests` tokens and refills at `requests / perSeconds` per second, so a
/// client can spend the whole allowance in a burst and then one more every `perSeconds / requests`.
/// Pure: the caller passes the time (nanoseconds on any monotonic clock).
public struct TokenBucket: Sendable, Equatable {
    public let limit: RateLimit
    private var tokens: Double
    private var updated: UInt64

    public init(limit: RateLimit, now: UInt64) {
        self.limit = limit
        tokens = Double(limit.requests)
        updated = now
    }

    private var ratePerNano: Double { Double(limit.requests) / (Double(limit.perSeconds) * 1e9) }

    private mutating func refill(_ now: UInt64) {
        guard now > updated else { return }
        tokens = min(Double(limit.requests), tokens + Double(now - updated) * ratePerNano)
        updated = now
    }

    /// Takes one token: `.allowed`, or `.limited` with the whole seconds until one is available.
    public mutating func take(now: UInt64) -> Decision {
        refill(now)
        if tokens >= 1 {
            tokens -= 1
            return .allowed
        }
        let wait = (1 - tokens) / ratePerNano / 1e9
        return .limited(retryAfterSeconds: max(1, Int(wait.rounded(.up))))
    }

    /// When the bucket was last used.
    public var lastUsed: UInt64 { updated }

    /// Whether the bucket is back to full (and so can be forgotten).
    public func isFull(now: UInt64) -> Bool {
        var copy = self
        copy.refill(now)
        return copy.tokens >= Double(limit.requests)
    }

    public enum Decision: Sendable, Equatable {
        case allowed
        case limited(retryAfterSeconds: Int)
    }
}
