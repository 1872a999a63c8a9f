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
/// plus the pooled upstream connections; see "File descriptors" in docs/operations.md.
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
        logger.error(
            "out of file descriptors",
            metadata: [
                "errno": "\(error == ENFILE ? "ENFILE" : "EMFILE") (\(String(cString: strerror(error))))",
                "while": "\(site.rawValue)", "limit": "\(limit.rlim_cur)",
                "failures_since_last_report": "\(held)", "failures_total": "\(events)",
                "hint":
                    "raise the descriptor limit (ulimit -n, systemd LimitNOFILE, docker --ulimit nofile); each proxied connection needs about 2",
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

    /// Raises the soft descriptor limit to the hard one, as Go's runtime and many servers do: the soft limit is
    /// often 1024 (systemd's default) while the hard one allows far more, and authproxy never uses `select`, so
    /// high descriptor numbers are safe. Returns the soft limit before and after.
    static func raiseSoftLimit() -> (before: UInt64, after: UInt64) {
        var l = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &l) == 0 else { return (0, 0) }
        let before = UInt64(l.rlim_cur)
        // An unlimited hard limit still cannot exceed fs.nr_open (1048576 by default).
        let target = l.rlim_max == rlim_t.max ? rlim_t(1 << 20) : l.rlim_max
        guard l.rlim_cur < target else { return (before, before) }
        l.rlim_cur = target
        guard setrlimit(Int32(RLIMIT_NOFILE.rawValue), &l) == 0 else { return (before, before) }
        return (before, UInt64(target))
    }

    /// Raises the soft limit and says what it allows: a notice when it was raised, a warning when it cannot cover
    /// `maxConnections` (about two descriptors per proxied connection).
    static func prepare(maxConnections: Int, logger: Logger) {
        let (before, after) = raiseSoftLimit()
        guard after > 0 else { return }
        if after > before {
            logger.notice("descriptor limit raised", metadata: ["from": "\(before)", "to": "\(after)"])
        }
        let connections = after / 2
        if connections < UInt64(maxConnections) {
            logger.warning(
                "the descriptor limit allows fewer connections than max_connections",
                metadata: [
                    "limit": "\(after)", "connections_about": "\(connections)", "max_connections": "\(maxConnections)",
                    "hint":
                        "raise the hard limit (ulimit -Hn, systemd LimitNOFILE, docker --ulimit nofile) or lower max_connections; beyond it clients get 503",
                ])
        }
    }
}
