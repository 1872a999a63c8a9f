/// What the PAC engine is doing, for `/readyz`: routing is stuck while an evaluation runs longer than
/// ``stuckAfterMillis`` or while the worker is being restarted after a failure. Pure (times are passed in).
///
/// An evaluation takes microseconds: one that runs for a second loops, or waits on a name lookup
/// (`dnsResolve`), and meanwhile every request for a destination not evaluated lately waits behind it. A balancer
/// should send new clients elsewhere until it ends (answered, or killed at the deadline).
enum PacEngineActivity: Equatable, Sendable {
    case idle
    /// `what`: the destination (`scheme://host:port/`) or "loading"; `since`: ms on a monotonic clock.
    case evaluating(what: String, since: UInt64)
    /// The worker died or was killed: a new one is starting with the last good PAC file.
    case restarting(why: String)

    static let stuckAfterMillis: UInt64 = 1000

    /// Why routing is stuck at `now`, or nil.
    func stall(now: UInt64) -> String? {
        switch self {
        case .idle:
            return nil
        case .evaluating(let what, let since):
            let ms = now &- since
            guard ms >= Self.stuckAfterMillis, ms < UInt64(Int64.max) else { return nil }
            return "the PAC file has been evaluating \(what) for \(ms / 1000) s (routing for new destinations waits)"
        case .restarting(let why):
            return "the PAC engine is restarting: \(why)"
        }
    }
}
