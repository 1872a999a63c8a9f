import Logging
import Synchronization

/// The log level shared by every ``ProxyLogHandler`` made with it, changeable while the proxy runs: a reload
/// of `[log] level` applies to every logger at once, including the copies held by long-lived objects (token
/// service, listeners). One relaxed atomic load per level check.
public final class LiveLogLevel: Sendable {
    private let raw: Atomic<Int>

    public init(_ level: Logger.Level) {
        raw = Atomic(Self.index(level))
    }

    public var level: Logger.Level {
        get { Self.level(raw.load(ordering: .relaxed)) }
        set { raw.store(Self.index(newValue), ordering: .relaxed) }
    }

    private static func index(_ l: Logger.Level) -> Int {
        switch l {
        case .trace: 0
        case .debug: 1
        case .info: 2
        case .notice: 3
        case .warning: 4
        case .error: 5
        case .critical: 6
        }
    }

    private static func level(_ i: Int) -> Logger.Level {
        switch i {
        case 0: .trace
        case 1: .debug
        case 2: .info
        case 3: .notice
        case 4: .warning
        case 5: .error
        default: .critical
        }
    }
}
