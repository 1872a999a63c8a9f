import CAuthProxyShims
import Dispatch

#if canImport(Glibc)
    import Glibc
#endif

/// What a ``SocketChannel`` reports to the object it serves, on the channel's queue.
protocol SocketChannelOwner: AnyObject {
    /// The socket has bytes (or EOF) to read.
    func channelReadable(_ channel: SocketChannel)
    /// ``SocketChannel/pendingCount`` fell to or below ``SocketChannel/lowWater`` after having been above it,
    /// or every pending byte is written.
    func channelDrained(_ channel: SocketChannel)
    /// A write failed (peer reset or gone); reported once.
    func channelWriteFailed(_ channel: SocketChannel, error: Int32)
    /// The non-blocking connect awaited with ``SocketChannel/awaitConnect()`` finished: `error` is 0 or the
    /// socket error.
    func channelConnected(_ channel: SocketChannel, error: Int32)
}

extension SocketChannelOwner {
    func channelConnected(_ channel: SocketChannel, error: Int32) {}
}

/// A layer a ``SocketChannel`` reads and writes through instead of the socket (TLS on an upstream connection of
/// the proxy's own client: ``CurlLink``; TLS from a client to the proxy listener itself: ``ProxyTLSLink``).
/// The channel's registration still watches the socket; the layer owns the descriptor and closes it when the
/// channel is done with it.
protocol SecureStream: AnyObject {
    /// `wouldBlock` only when the socket has nothing more to read (the channel then waits for its next event).
    func read(into buffer: UnsafeMutableRawBufferPointer) -> SocketChannel.ReadResult
    /// Bytes taken, 0 when the socket would block, -1 with `error` set.
    func send(_ bytes: UnsafeRawBufferPointer, error: inout Int32) -> Int
    /// Bytes the layer holds that a read returns without the socket becoming readable again.
    var hasBufferedInput: Bool { get }
    /// Our sending side is about to be shut down (everything pending is written): a layer that can say so in
    /// its own protocol does (a TLS close_notify), so the peer can tell the end from a cut.
    func willShutdownWrite()
    /// Called once the channel is closed and its socket no longer watched: the layer closes the descriptor.
    func closeDescriptor()
}

extension SecureStream {
    func willShutdownWrite() {}
}

/// A non-blocking stream socket served by its event loop's epoll set (``EventPoller``) on the loop's queue.
///
/// The socket is registered once, edge-triggered, for input and output; ``SocketReadiness`` turns the edges back into
/// the level-triggered contract the owners rely on: `channelReadable` comes again while input is pending and
/// reading is on (a few times in a row, then on the loop's next turn), and on ``resumeReading()`` when input
/// came while paused. Writes go straight to the socket; what the kernel does not take waits in ``pending`` and
/// goes out at the next writable edge. Owners apply back-pressure by watching ``pendingCount`` and pausing their
/// producer, and by ``pauseReading()``/``resumeReading()``. On ``close()`` the socket leaves the epoll set at
/// once (no event for it is delivered afterwards, even one already fetched) and the descriptor is closed on the
/// queue's next turn.
///
/// Events go to one ``owner`` rather than to per-event closures: a connection holds one of these for as long as
/// it is open, idle or not, so its size counts (bytes per idle connection, docs/BENCHMARKS.md). `owner` is
/// `unowned`: the owner holds the channel and closes it (which clears `owner`) before it goes away; a broken
/// rule traps instead of reading freed memory.
///
/// Confined to its queue: every method must be called on it (`@unchecked Sendable` only so Dispatch handlers
/// may capture it).
final class SocketChannel: @unchecked Sendable {
    /// Send-queue size below which a drain is reported again after it was above it.
    static let lowWater = 64 * 1024

    let fd: Int32
    private let poller: EventPoller
    /// The channel's entry in its poller's registry; 0 when it could not be registered.
    private var token: UInt64 = 0
    private var readiness = SocketReadiness()
    private var pending = ByteBuffer()
    /// When a send last moved bytes (uptime ns): a slow but steady reader is not idle.
    private(set) var lastSendProgress: UInt64 = 0
    unowned var owner: (any SocketChannelOwner)? {
        didSet {
            // Input that came while the channel had no owner (between a dialer and the connection it makes)
            // raised its edge already: the new owner hears of it.
            if owner != nil, !isClosed, readiness.inputDue { serveNextTurn() }
        }
    }
    /// Reads and writes go through this layer when set (it then closes the descriptor, not the channel). Set at
    /// creation, or once by ``layer(_:)`` when a client's first bytes turn out to be TLS to the proxy itself.
    private(set) var secure: (any SecureStream)?
    private var shutdownWhenFlushed = false
    private(set) var isClosed = false
    /// Whether the peer's side or ours failed: writes are dropped from then on.
    private(set) var failed = false
    /// A connect is awaited: the next event reports it (once) instead of draining.
    private var awaitingConnect = false
    private var wasAboveLowWater = false

    init(fd: Int32, queue: DispatchQueue, owner: (any SocketChannelOwner)? = nil, secure: (any SecureStream)? = nil) {
        self.fd = fd
        poller = EventPoller.of(queue)
        self.owner = owner
        self.secure = secure
        switch poller.register(self, fd: fd) {
        case .success(let t):
            token = t
        case .failure:
            // Unwatched, the socket would hang its owner: ended both ways instead, so the owner's next read sees
            // EOF and its next send fails, and it closes (the poller logged the cause).
            Glibc.shutdown(fd, Int32(SHUT_RDWR))
            readiness.event(readable: true, writable: true)
        }
    }

    var pendingCount: Int { pending.count }

    /// From now on every read and write goes through `stream`, which takes over the descriptor (a client that
    /// opened TLS to the proxy listener: the bytes above it are the same as on a plain connection). Only before
    /// anything was written and while no other layer is set.
    func layer(_ stream: any SecureStream) {
        assertOnQueue(poller.queue)
        precondition(secure == nil && pending.isEmpty, "a layer goes under a channel before anything is written")
        secure = stream
    }

    /// Frees the send queue's storage once it is empty (an idle connection keeps no buffer).
    func releaseIdleStorage() {
        if pending.isEmpty { pending.releaseStorage() }
    }

    func resumeReading() {
        assertOnQueue(poller.queue)
        guard !isClosed else { return }
        if readiness.resume(bufferedInput: secure?.hasBufferedInput ?? false) { serveNextTurn() }
    }

    /// Whether the peer reset the connection or it failed (POLLERR/POLLHUP), without reading: for a socket
    /// whose reads are paused, where a reset would otherwise go unseen.
    func peerHungUp() -> Bool {
        assertOnQueue(poller.queue)
        guard !isClosed else { return false }
        var p = pollfd(fd: fd, events: 0, revents: 0)
        return poll(&p, 1, 0) == 1 && p.revents & Int16(POLLERR | POLLHUP) != 0
    }

    func pauseReading() {
        assertOnQueue(poller.queue)
        guard !isClosed else { return }
        readiness.pause()
    }

    var isReading: Bool { readiness.reading }

    enum ReadResult {
        case bytes(Int)
        case wouldBlock
        case eof
        case error(Int32)
    }

    /// One `read(2)` into `buffer` (or one read of the ``secure`` layer).
    func read(into buffer: UnsafeMutableRawBufferPointer) -> ReadResult {
        assertOnQueue(poller.queue)
        if let s = secure {
            let r = s.read(into: buffer)
            switch r {
            case .bytes: readiness.consumed()
            case .wouldBlock: readiness.drained()
            case .eof, .error: readiness.readEnded()
            }
            return r
        }
        while true {
            let n = Glibc.read(fd, buffer.baseAddress, buffer.count)
            if n > 0 {
                // A short read emptied the socket (a byte that arrives later raises a new edge), unless the peer's
                // FIN came with the bytes: then the EOF is still to be read and no edge will say so.
                if n < buffer.count { readiness.shortRead() }
                return .bytes(n)
            }
            if n == 0 {
                readiness.readEnded()
                return .eof
            }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK:
                readiness.drained()
                return .wouldBlock
            default:
                let e = errno
                readiness.readEnded()
                return .error(e)
            }
        }
    }

    /// Queues `bytes` and writes what the socket takes now.
    func write(_ bytes: UnsafeRawBufferPointer) {
        assertOnQueue(poller.queue)
        guard !isClosed, !failed, !bytes.isEmpty else { return }
        if pending.isEmpty {
            let n = send(bytes)
            if n < 0 { return }
            if n == bytes.count { return }
            pending.append(UnsafeRawBufferPointer(rebasing: bytes[n...]))
        } else {
            pending.append(bytes)
        }
        if pending.count > Self.lowWater { wasAboveLowWater = true }
        readiness.wantWrite(true)
        // Still writable (a layer took part of the bytes): no edge will come to say so.
        if readiness.writable { serveNextTurn() }
    }

    func write(_ string: String) {
        var s = string
        s.withUTF8 { write(UnsafeRawBufferPointer($0)) }
    }

    func write(_ bytes: [UInt8]) {
        bytes.withUnsafeBytes { write($0) }
    }

    /// Half-closes our sending side once everything pending is written.
    func shutdownWriteWhenFlushed() {
        guard !isClosed else { return }
        if pending.isEmpty {
            secure?.willShutdownWrite()
            Glibc.shutdown(fd, Int32(SHUT_WR))
        } else {
            shutdownWhenFlushed = true
        }
    }

    /// Waits for a non-blocking `connect(2)` to finish; the owner hears of it in
    /// ``SocketChannelOwner/channelConnected(_:error:)``. Reading is on from here: the connected channel goes to its
    /// next owner reading.
    ///
    /// The socket was registered when the channel was made, after `connect(2)` began: the connect's outcome (out,
    /// or a hang-up for a refused or reset one) is its first edge, and an outcome that came before the
    /// registration is reported by it. So any event may be the outcome; ``connectFinished()`` tells.
    func awaitConnect() {
        awaitingConnect = true
        readiness.wantWrite(true)
        _ = readiness.resume(bufferedInput: false)
        if readiness.readable || readiness.writable { serveNextTurn() }
    }

    /// Looks whether the connect awaited by ``awaitConnect()`` finished (or failed): reported to the owner once.
    /// An event while the socket is still connecting, with no error, is not an outcome and is ignored.
    private func connectFinished() {
        var err: Int32 = 0
        var len = socklen_t(MemoryLayout<Int32>.size)
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len)
        if err == 0 {
            var peer = sockaddr_storage()
            var peerLen = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let connected = withUnsafeMutablePointer(to: &peer) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &peerLen) == 0 }
            }
            guard connected else { return }
        }
        awaitingConnect = false
        if pending.isEmpty { readiness.wantWrite(false) }
        owner?.channelConnected(self, error: err)
    }

    /// Leaves the epoll set now; the descriptor is closed (or given to the layer) on the queue's next turn.
    /// Nothing is reported to the owner afterwards.
    func close() {
        assertOnQueue(poller.queue)
        guard !isClosed else { return }
        isClosed = true
        owner = nil
        awaitingConnect = false
        pending.removeAll()
        if token != 0 { poller.deregister(token, fd: fd) }
        // On the next turn, as the old sources' cancel handlers did: code that still holds the number in this
        // turn never reaches a socket that reused it.
        poller.queue.async { [self] in
            if let s = secure { s.closeDescriptor() } else { Glibc.close(fd) }
        }
    }

    /// Gives the descriptor away instead of closing it: the channel is closed as by ``close()`` (its socket
    /// leaves the epoll set), and on the queue's next turn `take` gets the descriptor, open, and owns it from then
    /// on (to watch it with sources of its own).
    func relinquish(_ take: @escaping (Int32) -> Void) {
        assertOnQueue(poller.queue)
        guard !isClosed else { return }
        precondition(secure == nil, "only a plain channel gives its descriptor away")
        secure = Relinquished(fd: fd, take: take)
        close()
    }

    /// Sends with MSG_NOSIGNAL; returns bytes written (0 on EAGAIN) or -1 after reporting the error.
    private func send(_ bytes: UnsafeRawBufferPointer) -> Int {
        if let s = secure {
            var e: Int32 = 0
            let n = s.send(bytes, error: &e)
            if n >= 0 {
                // A layer may take part of the bytes without the socket being full (one TLS record of several):
                // only nothing taken means it would block.
                if n == 0 { readiness.sendBlocked() }
                return n
            }
            sendFailed(e)
            return -1
        }
        while true {
            let n = Glibc.send(fd, bytes.baseAddress, bytes.count, Int32(Glibc.MSG_NOSIGNAL))
            if n >= 0 {
                if n < bytes.count { readiness.sendBlocked() }
                return n
            }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK:
                readiness.sendBlocked()
                return 0
            default:
                sendFailed(errno)
                return -1
            }
        }
    }

    private func sendFailed(_ e: Int32) {
        failed = true
        pending.removeAll()
        readiness.wantWrite(false)
        owner?.channelWriteFailed(self, error: e)
    }

    private func serveNextTurn() {
        if token != 0 {
            poller.serveNextTurn(token)
        } else {
            // Not registered (see init): served by a plain turn of the queue instead.
            poller.queue.async { [self] in if !isClosed { serve() } }
        }
    }

    /// An event from the epoll set.
    func handle(events mask: UInt32) {
        let r = SocketReadiness.interpret(mask)
        readiness.event(readable: r.readable, writable: r.writable, hungUp: r.hungUp)
        serve()
    }

    /// Delivers what the readiness says is due, until nothing is or the channel had its turn.
    func serve() {
        if awaitingConnect {
            guard readiness.readable || readiness.writable else { return }
            connectFinished()
            if awaitingConnect { return }
        }
        var reads = 0
        while !isClosed {
            switch readiness.next(readsDelivered: reads) {
            case .write:
                writable()
            case .read:
                // Without an owner (a dialer let go of it) the input waits for the next one (see `owner`).
                guard let o = owner else { return }
                if let s = secure, !readiness.fresh, !s.hasBufferedInput, !socketHasInput() {
                    readiness.drained()
                    continue
                }
                reads += 1
                o.channelReadable(self)
            case .nextTurn:
                serveNextTurn()
                return
            case .none:
                return
            }
        }
    }

    /// Whether the socket has bytes, an EOF or an error to read (one `poll`, for a layered channel whose owner
    /// stopped after a record: the layer's reads do not say whether the socket is empty).
    private func socketHasInput() -> Bool {
        var p = pollfd(fd: fd, events: Int16(POLLIN) | Int16(truncatingIfNeeded: EPOLLRDHUP.rawValue), revents: 0)
        return poll(&p, 1, 0) == 1 && p.revents != 0
    }

    private func writable() {
        while !pending.isEmpty {
            let n = pending.withUnreadBytes { send($0) }
            if n < 0 || isClosed { return }
            if n == 0 { break }
            pending.consume(n)
            lastSendProgress = DispatchTime.now().uptimeNanoseconds
            if !readiness.writable { break }
        }
        if pending.isEmpty {
            readiness.wantWrite(false)
            if shutdownWhenFlushed {
                shutdownWhenFlushed = false
                secure?.willShutdownWrite()
                Glibc.shutdown(fd, Int32(SHUT_WR))
            }
        }
        if pending.isEmpty || (wasAboveLowWater && pending.count <= Self.lowWater) {
            wasAboveLowWater = false
            owner?.channelDrained(self)
        }
    }
}

/// Stands in as the layer of a channel that gave its descriptor away (``SocketChannel/relinquish(_:)``): the
/// channel is closed, so nothing is read or written through it; the channel's deferred close hands the
/// descriptor over instead of closing it.
private final class Relinquished: SecureStream {
    private let fd: Int32
    private let take: (Int32) -> Void

    init(fd: Int32, take: @escaping (Int32) -> Void) {
        self.fd = fd
        self.take = take
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> SocketChannel.ReadResult { .error(EBADF) }

    func send(_ bytes: UnsafeRawBufferPointer, error: inout Int32) -> Int {
        error = EBADF
        return -1
    }

    var hasBufferedInput: Bool { false }

    func closeDescriptor() { take(fd) }
}
