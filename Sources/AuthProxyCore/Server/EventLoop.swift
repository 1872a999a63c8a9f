import Dispatch
import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// One serial queue, run by a thread of its own (``ProxyQueue/ownThread(_:)``), with everything that runs on it: the epoll
/// set its sockets are registered in (``EventPoller``), a libcurl multi handle, the client connections
/// assigned to this loop, a read scratch buffer and a once-a-second timer that enforces timeouts.
///
/// All state is touched only on `queue` (`@unchecked Sendable` so other queues can hand it work).
final class EventLoop: @unchecked Sendable {
    let queue: DispatchQueue
    /// Watches every ``SocketChannel`` of this loop (client connections, the own client's upstream connections,
    /// tunnels) with one epoll set and one Dispatch source.
    let poller: EventPoller
    let multi: CurlMulti
    /// Kept-alive connections of the proxy's own HTTP/1.1 client (`http://` and `https://` upstreams).
    let http1: UpstreamConnectionPool
    /// The configuration generation new exchanges on this loop use. Replaced (on `queue`) by a reload; an
    /// exchange keeps the one it began with (``ExchangeContext/context``).
    private(set) var context: ServerContext
    /// Shared read buffer: every read on this loop lands here first, then is copied where it belongs.
    let scratch: UnsafeMutableRawBufferPointer
    /// Where a response chunk is framed before it is written.
    let assembly: UnsafeMutableRawBufferPointer
    /// Where ciphertext for intercepted clients is taken out of OpenSSL on its way to the socket (see
    /// ``TLSSession/drain(through:_:)``).
    let tlsOut: UnsafeMutableRawBufferPointer
    private var connections: [ObjectIdentifier: ClientConnection] = [:]
    /// Contexts of exchanges that ended, for the next ones on this loop (see ``ExchangeContext``): as many are
    /// kept as were in use at once during the last second, trimmed by the sweep.
    var exchangeContexts = ReusePool<ExchangeContext>(capacity: 256)
    /// `authproxy_requests_total` handles used on this loop (when metrics are on).
    var requestCounters = RequestCounters()
    /// The retry budget of each upstream host, for the requests this loop carries.
    // Confined to the loop's queue: no dynamic exclusivity check on the per-request count.
    @exclusivity(unchecked) var retryBudget = RetryBudget()
    private var sweeper: (any DispatchSourceTimer)?
    /// Whether the sweep timer is running: it stops at the first tick that finds no connection, so an idle
    /// proxy does not wake its loops' threads (and libdispatch's manager) every second.
    private var sweeperArmed = true
    private(set) var shuttingDown = false

    init(index: Int, context: ServerContext) {
        queue = ProxyQueue.ownThread("authproxy.loop.\(index)")
        // The loop's epoll set, which every socket channel on this queue registers in.
        poller = EventPoller.of(queue)
        multi = CurlMulti(queue: queue)
        http1 = UpstreamConnectionPool(queue: queue, multi: multi)
        self.context = context
        scratch = .allocate(byteCount: 64 * 1024, alignment: 16)
        assembly = .allocate(byteCount: 80 * 1024, alignment: 16)
        tlsOut = .allocate(byteCount: 32 * 1024, alignment: 16)
        let t = DispatchSource.makeTimerSource(queue: queue)
        t.schedule(deadline: .now() + 1, repeating: 1, leeway: .milliseconds(100))
        t.setEventHandler { [unowned self] in self.sweep() }
        t.resume()
        sweeper = t
    }

    var connectionCount: Int { connections.count }

    /// Blind CONNECT tunnels open on this loop (for the status page and `authproxy_tunnels`).
    var tunnelCount: Int { connections.values.reduce(0) { $0 + ($1.tunnel != nil ? 1 : 0) } }

    /// A reload: exchanges that begin from now on use `next`; those in flight keep theirs.
    func install(_ next: ServerContext) {
        dispatchPrecondition(condition: .onQueue(queue))
        context = next
        // A narrowed allow_clients reaches open connections too, not only the next accepted ones.
        for c in Array(connections.values) { c.reloadInstalled(next) }
    }

    /// Takes ownership of an accepted socket, which holds a slot of ``AccessControl/connections`` for
    /// `address` (given back when the connection closes).
    func adopt(fd: Int32, peer: String, address: IPAddress) {
        dispatchPrecondition(condition: .onQueue(queue))
        if shuttingDown {
            Glibc.close(fd)
            context.access.connections.release(address)
            return
        }
        let c = ClientConnection(fd: fd, peer: peer, address: address, loop: self)
        connections[ObjectIdentifier(c)] = c
        if !sweeperArmed {
            sweeperArmed = true
            sweeper?.schedule(deadline: .now() + 1, repeating: 1, leeway: .milliseconds(100))
        }
        c.start()
    }

    func connectionClosed(_ c: ClientConnection) {
        if connections.removeValue(forKey: ObjectIdentifier(c)) != nil {
            context.access.connections.release(c.address)
        }
    }

    /// Stop taking new requests: busy connections close after their current exchange, idle ones after a short
    /// quiet time (``ExchangeStateMachine/Limits/shutdownQuiet``), blind tunnels when the grace period ends.
    func beginShutdown() {
        dispatchPrecondition(condition: .onQueue(queue))
        shuttingDown = true
        for c in Array(connections.values) { c.shutdownRequested() }
    }

    /// Ends whatever is still open (end of the grace period); exchanges cut here are logged.
    func closeAll() {
        dispatchPrecondition(condition: .onQueue(queue))
        for c in Array(connections.values) { c.graceExpired() }
        http1.closeAll()
    }

    private func sweep() {
        let now = DispatchTime.now().uptimeNanoseconds
        http1.expire(now: now)
        retryBudget.prune(now: now)
        if connections.isEmpty {
            sweeperArmed = false
            sweeper?.schedule(deadline: .distantFuture)
            return
        }
        for c in Array(connections.values) { c.checkTimeouts(now: now) }
        exchangeContexts.trim()
    }
}

extension EventLoop {
    /// Writes response body bytes, preceded by the held response `head` (may be empty) and framed as a chunk
    /// when `chunked`, in a single write when it fits the assembly buffer. No allocation.
    func writeBody(
        _ bytes: UnsafeRawBufferPointer, head: UnsafeRawBufferPointer, chunked: Bool,
        sink: (UnsafeRawBufferPointer) -> Void
    ) {
        if !chunked, head.isEmpty {
            sink(bytes)
            return
        }
        // "<hex size>\r\n" is at most 18 bytes.
        let total = head.count + (chunked ? 18 + 2 : 0) + bytes.count
        guard total <= assembly.count else {
            if !head.isEmpty { sink(head) }
            if chunked {
                withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 18) { line in
                    let n = Self.chunkSizeLine(bytes.count, into: line.baseAddress!)
                    sink(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(line)[0..<n]))
                }
            }
            sink(bytes)
            if chunked { sink(UnsafeRawBufferPointer(start: Self.crlf.utf8Start, count: 2)) }
            return
        }
        let base = assembly.baseAddress!.assumingMemoryBound(to: UInt8.self)
        var off = 0
        if !head.isEmpty {
            (base + off).update(from: head.baseAddress!.assumingMemoryBound(to: UInt8.self), count: head.count)
            off += head.count
        }
        if chunked { off += Self.chunkSizeLine(bytes.count, into: base + off) }
        if !bytes.isEmpty {
            (base + off).update(from: bytes.baseAddress!.assumingMemoryBound(to: UInt8.self), count: bytes.count)
            off += bytes.count
        }
        if chunked {
            base[off] = 13
            base[off + 1] = 10
            off += 2
        }
        sink(UnsafeRawBufferPointer(start: base, count: off))
    }

    private static let crlf: StaticString = "\r\n"

    /// Writes `n` in lowercase hex followed by CRLF at `p`; returns the bytes written.
    static func chunkSizeLine(_ n: Int, into p: UnsafeMutablePointer<UInt8>) -> Int {
        var digits = 1
        while digits < 16, n >> (4 * digits) != 0 { digits += 1 }
        for i in 0..<digits {
            let d = UInt8((n >> (4 * (digits - 1 - i))) & 0xf)
            p[i] = d < 10 ? 48 + d : 87 + d
        }
        p[digits] = 13
        p[digits + 1] = 10
        return digits + 2
    }
}

/// A set shared by all loops, to log something once per key.
///
/// Ownership: every access goes through `lock`.
final class OnceSet: @unchecked Sendable {
    private var seen: Set<String> = []
    private let lock = Lock()

    /// Keys remembered at most (a client can make up host names without end); past it, nothing more is logged.
    static let limit = 10_000

    /// True the first time `key` is seen.
    func first(_ key: String) -> Bool {
        lock.withLock { seen.count < Self.limit && seen.insert(key).inserted }
    }
}
