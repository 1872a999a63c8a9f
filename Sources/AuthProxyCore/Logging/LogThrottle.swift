import Synchronization

/// Lets a kind of log line through at most once per interval and counts what it held back, so a flood of
/// refused connections cannot flood the log (or fill the disk) while the operator still learns how many.
public final class LogThrottle: Sendable {
    private let intervalNanos: UInt64
    private let state = Mutex<[String: (last: UInt64, suppressed: Int)]>([:])

    public init(intervalSeconds: Double = 10) {
        intervalNanos = UInt64(intervalSeconds * 1e9)
    }

    /// nil: stay quiet; otherwise log now, mentioning the returned number of lines held back since the last one.
    public func admit(_ kind: String, now: UInt64) -> Int? {
        state.withLock { s in
            if let e = s[kind], now &- e.last < intervalNanos {
                s[kind] = (e.last, e.suppressed + 1)
                return nil
            }
            let held = s[kind]?.suppressed ?? 0
            s[kind] = (now, 0)
            return held
        }
    }
}
