import CAuthProxyShims
import Dispatch
import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// One epoll set per event loop queue, watched by one Dispatch read source on that queue.
///
/// libdispatch's Linux backend makes every event of a per-socket read source cost an `ioctl(FIONREAD)`, two
/// `epoll_ctl` (its registrations are one-shot and re-armed) and hand-offs between its manager thread and the
/// loop's thread (docs/BENCHMARKS.md, "Where the wake-ups come from"). Here each socket is registered once,
/// edge-triggered and persistent (``SocketReadiness/registration``), in the loop's own set; the one source watches
/// only the set's descriptor, so libdispatch's cost is paid once per wake-up of the loop, and a wake-up delivers
/// every event that is ready (at most ``batch``; the source fires again while more are). On a non-socket the
/// source's `ioctl` fails once with ENOTTY and libdispatch stops making it.
///
/// Events reach their ``SocketChannel`` through a ``PollRegistry`` token, so one for a channel closed earlier in
/// the same batch is dropped. Channels that must be served again without an event (input still pending after
/// their turn, reading resumed with input pending) are kept in `ready` and served on the queue's next turn.
///
/// Confined to `queue` (`@unchecked Sendable` only so the Dispatch handlers may capture it).
final class EventPoller: @unchecked Sendable {
    let queue: DispatchQueue
    private let epfd: Int32
    private var source: (any DispatchSourceRead)?
    private var registry = PollRegistry<SocketChannel>()
    private let events: UnsafeMutablePointer<epoll_event>
    /// Tokens of channels to serve on the next turn.
    private var ready: [UInt64] = []
    private var readyScheduled = false

    /// Events taken from the kernel per `epoll_wait`.
    static let batch = 64

    private static let key = DispatchSpecificKey<EventPoller>()
    private static let logger = Logger(label: "authproxy")

    /// The poller of `queue` (a serial queue), made on first use: an event loop makes its own at start-up
    /// (``EventLoop``); any other queue a channel runs on gets one the first time.
    static func of(_ queue: DispatchQueue) -> EventPoller {
        if let p = queue.getSpecific(key: key) { return p }
        let p = EventPoller(queue: queue)
        queue.setSpecific(key: key, value: p)
        return p
    }

    private init(queue: DispatchQueue) {
        self.queue = queue
        epfd = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard epfd >= 0 else {
            // Only at start-up (one per event loop), where there is nothing to serve without it.
            fatalError("epoll_create1 failed for \(queue.label): \(String(cString: strerror(errno)))")
        }
        events = .allocate(capacity: Self.batch)
        let s = DispatchSource.makeReadSource(fileDescriptor: epfd, queue: queue)
        s.setEventHandler { [unowned self] in self.deliver() }
        s.resume()
        source = s
    }

    /// Channels registered now.
    var count: Int { registry.count }

    /// Registers `channel`'s descriptor; returns its token, or the error (`epoll_ctl` fails only when the kernel
    /// is out of memory or `fs.epoll.max_user_watches` is reached).
    func register(_ channel: SocketChannel, fd: Int32) -> Result<UInt64, Errno> {
        assertOnQueue(queue)
        let token = registry.insert(channel)
        var ev = epoll_event(events: SocketReadiness.registration, data: epoll_data_t(u64: token))
        guard epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0 else {
            let e = errno
            registry.remove(token)
            let hint = e == ENOSPC ? " (the fs.epoll.max_user_watches sysctl is reached)" : ""
            Self.logger.error("cannot watch a socket: epoll_ctl(ADD) failed: \(String(cString: strerror(e)))\(hint)")
            return .failure(Errno(e))
        }
        return .success(token)
    }

    /// Stops watching `fd` for the channel under `token`: events still in the batch being delivered, and a turn
    /// scheduled for it, find nothing. Must come before the descriptor is closed or given away.
    func deregister(_ token: UInt64, fd: Int32) {
        assertOnQueue(queue)
        guard registry[token] != nil else { return }
        registry.remove(token)
        _ = epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nil)
    }

    /// Serves the channel under `token` on the queue's next turn (not inline: the caller may be its owner).
    func serveNextTurn(_ token: UInt64) {
        ready.append(token)
        guard !readyScheduled else { return }
        readyScheduled = true
        queue.async { [self] in
            readyScheduled = false
            let tokens = ready
            ready.removeAll(keepingCapacity: true)
            for t in tokens { registry[t]?.serve() }
        }
    }

    private func deliver() {
        let n = epoll_wait(epfd, events, Int32(Self.batch), 0)
        guard n > 0 else { return }
        for i in 0..<Int(n) {
            let ev = events[i]
            registry[ev.data.u64]?.handle(events: ev.events)
        }
    }
}

/// An `errno` value as an error.
struct Errno: Error, Equatable {
    let code: Int32
    init(_ code: Int32) { self.code = code }
}
