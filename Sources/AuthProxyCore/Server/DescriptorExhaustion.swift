import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The process running out of file descriptors (EMFILE, or ENFILE for the whole system): counted wherever a
/// descriptor could not be opened (accepting a client, an upstream socket, a tunnel's socket) and logged at most
/// once per ``intervalSeconds`` with the number seen meanwhile. (A listener that cannot accept pauses itself.)
///
/// Budget: each proxied connection needs about two descriptors (the client's socket and an upstream socket),
/// plus the pooled upstream connections; see the README's "File descriptors".
///
/// Shared by the listeners and every event loop: an atomic counter and a locked ``LogThrottle``.
final class DescriptorExhaustion: Sendable {
    /// Where a descriptor could not be had.
    enum Site: String, Sendable {
        case accept = "accepting a client connection"
        case upstream = "opening an upstream connection"
        case tunnel = "opening a CONNECT tunnel"
    }

    static let intervalSeconds = 5.0

    private let throttle = LogThrottle(intervalSeconds: DescriptorExhaustion.intervalSeconds)
    private let failures = Atomic<Int>(0)

    /// Whether `error` means the process (EMFILE) or the system (ENFILE) is out of descriptors.
    static func isExhaustion(_ error: Int32) -> Bool { error == EMFILE || error == ENFILE }

    /// Counts one failure; returns the number of failures held back since the last line when a line is due now
    /// (at most one per ``intervalSeconds``), nil otherwise.
    func record(now: UInt64) -> Int? {
        failures.add(1, ordering: .relaxed)
        return throttle.admit("descriptors", now: now)
    }

    /// Failures counted since the start.
    var events: Int { failures.load(ordering: .relaxed) }

    /// Counts one failure and logs it, rate-limited, with what to do about it.
    func report(_ site: Site, error: Int32, logger: Logger, now: UInt64) {
        guard let held = record(now: now) else { return }
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        logger.error("out of file descriptors", metadata: [
            "errno": "\(error == ENFILE ? "ENFILE" : "EMFILE") (\(String(cString: strerror(error))))",
            "while": "\(site.rawValue)", "limit": "\(limit.rlim_cur)",
            "failures_since_last_report": "\(held)", "failures_total": "\(events)",
            "hint": "raise the descriptor limit (ulimit -n, systemd LimitNOFILE, docker --ulimit nofile); each proxied connection needs about 2",
        ])
    }

    /// Whether the process cannot open one more descriptor right now (for failures whose cause libcurl does not
    /// report, like a name lookup that could not open its socket).
    static func processIsOut() -> Bool {
        let fd = fcntl(2, F_DUPFD_CLOEXEC, 0)
        if fd >= 0 {
            close(fd)
            return false
        }
        return isExhaustion(errno)
    }
}
