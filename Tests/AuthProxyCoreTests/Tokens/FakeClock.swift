import Synchronization

@testable import AuthProxyCore

/// A ``WallClock`` that moves only when a test moves it.
final class FakeClock: WallClock {
    private let now: Mutex<Int64>

    init(_ start: Int64) { now = Mutex(start) }

    func nowMillis() -> Int64 { now.withLock { $0 } }

    func advance(_ millis: Int64) { now.withLock { $0 += millis } }
}
