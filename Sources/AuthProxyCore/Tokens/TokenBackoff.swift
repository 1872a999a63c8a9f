/// When a failing credential may ask its token service again: 1 s after the first failure, doubling, capped
/// at ``cap`` (30 s), so a token service that comes back is noticed within half a minute.
///
/// A value type on a millisecond clock the caller passes in, so tests drive it without waiting.
public struct TokenBackoff: Sendable, Equatable {
    public static let base: Int64 = 1000
    public static let cap: Int64 = 30_000
    /// Failures further apart than this start the schedule again (a credential that failed once an hour
    /// ago is not treated as failing for 30 s now).
    public static let forgetAfter: Int64 = 2 * cap

    public private(set) var failures = 0
    /// Milliseconds since the epoch before which no new attempt is made.
    public private(set) var retryAt: Int64 = 0
    public private(set) var lastFailureAt: Int64 = 0

    public init() {}

    /// The wait after `failures` consecutive failures (≥ 1): 1, 2, 4, 8, 16, 30, 30, … s.
    public static func delay(afterFailures failures: Int) -> Int64 {
        guard failures > 0 else { return 0 }
        return min(cap, base << Int64(min(failures - 1, 16)))
    }

    /// The longest `Retry-After` of a token service that is honoured: a provider asking for an hour would leave
    /// every request without a token for that hour once the token expired; past five minutes the proxy asks again.
    public static let maxRetryAfter: Int64 = 300_000

    /// Records a failure at `now`; returns the wait until the next attempt. `retryAfter`: the pause the token service
    /// asked for (milliseconds), which the wait is at least, up to ``maxRetryAfter``.
    @discardableResult
    public mutating func failed(at now: Int64, retryAfter: Int64? = nil) -> Int64 {
        if failures > 0, now - lastFailureAt > Self.forgetAfter { failures = 0 }
        failures += 1
        lastFailureAt = now
        let wait = max(Self.delay(afterFailures: failures), min(retryAfter ?? 0, Self.maxRetryAfter))
        retryAt = now + wait
        return wait
    }

    /// The wait is over now, but the failures still count (the next one waits longer).
    public mutating func endWait() {
        retryAt = 0
    }

    public mutating func succeeded() {
        failures = 0
        retryAt = 0
    }

    public func isBackingOff(at now: Int64) -> Bool { now < retryAt }

    /// Whole seconds (rounded up) until the next attempt; 0 when one may be made now.
    public func secondsLeft(at now: Int64) -> Int64 { max(0, (retryAt - now + 999) / 1000) }
}
