import Synchronization

/// The token buckets of every (credential, client) pair, shared by all event loops.
///
/// Memory is bounded: buckets that have refilled completely are forgotten (a full bucket is the same as a new
/// one), swept at most once per ``sweepInterval``; a hard cap drops the fullest-looking ones first.
public final class RateLimiter: Sendable {
    private struct State {
        var buckets: [Key: TokenBucket] = [:]
        var lastSweep: UInt64 = 0
    }

    struct Key: Hashable {
        var credential: String
        var client: String
    }

    private let state = Mutex(State())
    static let sweepInterval: UInt64 = 10_000_000_000
    static let maxBuckets = 100_000

    public init() {}

    /// Spends one request of `client` against `credential`'s limit.
    public func take(credential: String, client: String, limit: RateLimit, now: UInt64) -> TokenBucket.Decision {
        state.withLock { s in
            if now &- s.lastSweep > Self.sweepInterval || s.buckets.count >= Self.maxBuckets {
                s.lastSweep = now
                s.buckets = s.buckets.filter { !$0.value.isFull(now: now) }
                if s.buckets.count >= Self.maxBuckets {
                    // Still full of active clients: forget the least recently used half, not everyone's.
                    let keep = s.buckets.sorted { $0.value.lastUsed > $1.value.lastUsed }.prefix(Self.maxBuckets / 2)
                    s.buckets = Dictionary(uniqueKeysWithValues: keep.map { ($0.key, $0.value) })
                }
            }
            let key = Key(credential: credential, client: client)
            var bucket = s.buckets[key] ?? TokenBucket(limit: limit, now: now)
            if bucket.limit != limit { bucket = TokenBucket(limit: limit, now: now) }
            let d = bucket.take(now: now)
            s.buckets[key] = bucket
            return d
        }
    }

    /// Number of buckets held (for tests of the memory bound).
    var count: Int { state.withLock { $0.buckets.count } }
}
