/// A credential's `daily_quota` count for the current UTC day. Pure: the caller passes the wall-clock time (seconds
/// since the Unix epoch); the count starts again at UTC midnight.
struct DailyQuota: Sendable, Equatable {
    /// Days since the epoch of the day counted.
    private(set) var day: Int64 = -1
    private(set) var used = 0

    static let secondsPerDay: Int64 = 86_400

    /// Spends one request of `quota` at `now`: `.allowed`, or `.limited` with the seconds until the next UTC midnight.
    mutating func take(quota: Int, now: Int64) -> TokenBucket.Decision {
        let today = now / Self.secondsPerDay
        if today != day {
            day = today
            used = 0
        }
        guard used < quota else { return .limited(retryAfterSeconds: Self.secondsToMidnight(now)) }
        used += 1
        return .allowed
    }

    static func secondsToMidnight(_ now: Int64) -> Int {
        Int(max(1, (now / secondsPerDay + 1) * secondsPerDay - now))
    }
}
