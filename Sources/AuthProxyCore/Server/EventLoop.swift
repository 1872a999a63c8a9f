import Dispatch
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// One serial queue with everything that runs on it: a libcurl multi handle, the client connections
/// assigned to this loop, a read scratch buffer and a once-a-second timer that enforces timeouts.
///
/// All state is touched only on `queue` (`@unchecked Sendable` so other queues can hand it work).
final class EventLoop: @unchecked Sendable {
    let queue: DispatchQueue
    let multi: CurlMulti
    let context: ServerContext
    /// Shared read buffer: every read on this loop lands here first, then is copied where it belongs.
    let scratch: UnsafeMutableRawBufferPointer
    /// Where a response chunk is framed before it is written.
    let assembly: UnsafeMutableRawBufferPointer
    private var connections: [ObjectIdentifier: ClientConnection] = [:]
    private var sweeper: (any DispatchSourceTimer)?
    private(set) var shuttingDown = false

    init(index: Int, context: ServerContext) {
        queue = DispatchQueue(label: "authproxy.loop.\(index)", qos: .userInitiated)
        multi = CurlMulti(queue: queue)
        self.context = context
        scratch = .allocate(byteCount: 64 * 1024, alignment: 16)
        assembly = .allocate(byteCount: 80 * 1024, alignment: 16)
        let t = DispatchSource.makeTimerSource(queue: queue)
        t.schedule(deadline: .now() + 1, repeating: 1, leeway: .milliseconds(100))
        t.setEventHandler { [unowned self] in self.sweep() }
        t.resume()
        sweeper = t
    }

    var connectionCount: Int { connections.count }

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
        c.start()
    }

    func connectionClosed(_ c: ClientConnection) {
        if connections.removeValue(forKey: ObjectIdentifier(c)) != nil {
            context.access.connections.release(c.address)
        }
    }

    /// Stop taking new requests: idle connections close now, busy ones after their current exchange.
    func beginShutdown() {
        dispatchPrecondition(condition: .onQueue(queue))
        shuttingDown = true
        for c in Array(connections.values) { c.shutdownRequested() }
    }

    /// Closes whatever is still open (end of the grace period).
    func closeAll() {
        dispatchPrecondition(condition: .onQueue(queue))
        for c in Array(connections.values) { c.close() }
    }

    private func sweep() {
        let now = DispatchTime.now().uptimeNanoseconds
        for c in Array(connections.values) { c.checkTimeouts(now: now) }
    }
}

/// Settings every loop reads, fixed at start.
struct ServerContext: Sendable {
    let config: ProxyConfig
    let logger: Logger
    /// Client allow-list, proxy authentication, scopes, rate and connection limits, denied destinations.
    let access: AccessControl
    /// `host:port` strings under which clients reach the proxy itself.
    let ownAuthorities: Set<String>
    /// nil when no token-type credential is configured.
    let tokens: TokenService?
    /// nil when interception is off (no `[tls]` CA).
    let tlsServer: TLSServer?
    /// Hosts already reported as "matched but not interceptable" (logged once each).
    let notices: OnceSet
    let viaValue = "1.1 authproxy"
}

extension EventLoop {
    /// Writes response body bytes, preceded by the held response `head` if there is one and framed as a
    /// chunk when `chunked`, in a single write when it fits the assembly buffer.
    func writeBody(_ bytes: UnsafeRawBufferPointer, head: String?, chunked: Bool, sink: (UnsafeRawBufferPointer) -> Void) {
        var prefix = head ?? ""
        if chunked {
            prefix += String(bytes.count, radix: 16)
            prefix += "\r\n"
        }
        let suffix = chunked ? 2 : 0
        let total = prefix.utf8.count + bytes.count + suffix
        guard total <= assembly.count else {
            prefix.withUTF8 { sink(UnsafeRawBufferPointer($0)) }
            sink(bytes)
            if chunked {
                var crlf = "\r\n"
                crlf.withUTF8 { sink(UnsafeRawBufferPointer($0)) }
            }
            return
        }
        if prefix.isEmpty {
            sink(bytes)
            return
        }
        var off = 0
        prefix.withUTF8 { h in
            assembly.baseAddress!.copyMemory(from: h.baseAddress!, byteCount: h.count)
            off = h.count
        }
        (assembly.baseAddress! + off).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        off += bytes.count
        if chunked {
            assembly[off] = 13
            assembly[off + 1] = 10
        }
        sink(UnsafeRawBufferPointer(rebasing: assembly[0..<total]))
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
