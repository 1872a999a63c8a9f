/// When to look at the configuration inputs after file-system events: not at the first event, because an
/// editor's save or a Kubernetes volume update is a burst of events (create the new timestamped directory,
/// write each file, swap the `..data` link, delete the old directory), and a look in the middle of it could see
/// half an update. The look comes once the events have been quiet for ``quiet``, and at the latest ``maxDelay``
/// after the first event of a burst, so a file rewritten without pause is still picked up.
///
/// A value with no clock and no I/O: each call takes `now` (nanoseconds, monotonic) and answers with the
/// action; ``ConfigWatcher`` owns the one timer it asks for.
struct ChangeDebouncer: Equatable {
    enum Action: Equatable {
        /// Nothing to do (a timer is already set and will decide).
        case none
        /// Set the (single) timer to fire at this time, replacing any other.
        case armTimer(at: UInt64)
        /// Re-read the inputs now and reload if their contents changed.
        case check
    }

    let quiet: UInt64
    let maxDelay: UInt64
    private var firstEvent: UInt64? = nil
    private var lastEvent: UInt64 = 0

    init(quiet: UInt64 = 300_000_000, maxDelay: UInt64 = 2_000_000_000) {
        self.quiet = quiet
        self.maxDelay = maxDelay
    }

    /// Whether a burst is pending (a timer is set).
    var pending: Bool { firstEvent != nil }

    /// A file-system event arrived.
    mutating func eventSeen(now: UInt64) -> Action {
        lastEvent = now
        if firstEvent == nil {
            firstEvent = now
            return .armTimer(at: now + quiet)
        }
        return .none
    }

    /// The timer set by the last ``Action/armTimer(at:)`` fired.
    mutating func timerFired(now: UInt64) -> Action {
        guard let first = firstEvent else { return .none }
        let quietUntil = lastEvent + quiet
        let latest = first + maxDelay
        if now >= quietUntil || now >= latest {
            firstEvent = nil
            return .check
        }
        return .armTimer(at: min(quietUntil, latest))
    }
}
