#if canImport(Glibc)
    import Glibc
#endif

/// The wall clock, in milliseconds since the epoch: what token expiries, backoffs and probe budgets are measured
/// on. Code whose decisions depend on time takes one (the system's by default), so tests move time with a fake
/// clock instead of waiting for it.
public protocol WallClock: Sendable {
    func nowMillis() -> Int64
}

/// The system's realtime clock: token services give expiries as epoch times (corrected by ``ServerClock``), so a
/// monotonic clock could not be compared with them.
public struct SystemWallClock: WallClock {
    public init() {}

    public func nowMillis() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec / 1_000_000)
    }
}

/// The system clock, for code that has no clock of its own.
func nowMillis() -> Int64 { SystemWallClock().nowMillis() }
