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
/// The channel's Dispatch sources still watch the socket; the layer owns the descriptor and closes it when the
/// channel is done with it.
protocol SecureStream: AnyObject {
    func read(into buffer: UnsafeMutableRawBufferPointer) -> SocketChannel.ReadResult
    /// Bytes taken, 0 when the socket would block, -1 with `error` set.
    func send(_ bytes: UnsafeRawBufferPointer, error: inout Int32) -> Int
    /// Bytes the layer holds that a read returns without the socket becoming readable again.
    var hasBufferedInput: Bool { get }
    /// Our sending side is about to be shut down (everything pending is written): a layer that can say so in
    /// its own protocol does (a TLS close_notify), so the peer can tell the end from a cut.
    func willShutdownWrite()
    /// Called once both Dispatch sources are cancelled: the layer closes the descriptor.
    func closeDescriptor()
}

extension SecureStream {
    func willShutdownWrite() {}
}

/// A non-blocking stream socket driven by one read and one write Dispatch source on its event loop's queue.
///
/// Writes go straight to the socket; what the kernel does not take waits in ``pending`` and the write source
/// drains it. The write source is made only when a `send` would block (or a connect is awaited): most
/// connections never need one, and an unused source still costs its allocation and, when the connection closes,
/// an activation just to be cancelled. Owners apply back-pressure by watching ``pendingCount`` and pausing their
/// producer, and by ``pauseReading()``/``resumeReading()``. The descriptor is closed only after both sources'
/// cancel handlers have run, so a new socket can never reuse the number while an old source still watches it.
///
/// Events go to one ``owner`` rather than to per-event closures, and the sources are kept as `DispatchSource`
/// class references rather than existentials: a connection holds one of these for as long as it is open, idle
/// or not, so its size counts (bytes per idle connection, docs/BENCHMARKS.md). `owner` is `unowned`: the owner holds the
/// channel and closes it (which clears `owner`) before it goes away; a broken rule traps instead of reading
/// freed memory.
///
/// Confined to `queue`: every method must be called on it (`@unchecked Sendable` only so Dispatch handlers
/// may capture it).
final class SocketChannel: @unchecked Sendable {
    /// Send-queue size below which a drain is reported again after it was above it.
    static let lowWater = 64 * 1024

    let fd: Int32
    private let queue: DispatchQueue
    private let readSource: DispatchSource
    /// Made by ``armWrite()`` the first time it is needed.
    private var writeSource: DispatchSource?
    private var pending = ByteBuffer()
    /// When a send last moved bytes (uptime ns): a slow but steady reader is not idle.
    private(set) var lastSendProgress: UInt64 = 0
    unowned var owner: (any SocketChannelOwner)?
    /// Reads and writes go through this layer when set (it then closes the descriptor, not the channel). Set at
    /// creation, or once by ``layer(_:)`` when a client's first bytes turn out to be TLS to the proxy itself.
    private(set) var secure: (any SecureStream)?
    /// Sources whose cancel handler has not run yet; the descriptor is closed when this reaches 0.
    private var liveSources: UInt8 = 1
    private var readResumed = false
    /// The read source was resumed before: a later resume follows a pause, not the first activation.
    private var activated = false
    private var writeResumed = false
    private var shutdownWhenFlushed = false
    private(set) var isClosed = false
    /// Whether the peer's side or ours failed: writes are dropped from then on.
    private(set) var failed = false
    /// A connect is awaited: the next writable event reports it (once) instead of draining.
    private var awaitingConnect = false
    private var wasAboveLowWater = false

    init(fd: Int32, queue: DispatchQueue, owner: (any SocketChannelOwner)? = nil, secure: (any SecureStream)? = nil) {
        self.fd = fd
        self.queue = queue
        self.owner = owner
        self.secure = secure
        // The concrete class behind every source the overlay makes (8 bytes stored instead of a 40-byte existential).
        readSource = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue) as! DispatchSource
        readSource.setEventHandler { [unowned self] in
            if self.awaitingConnect {
                self.connectFinished(readEvent: true)
            } else {
                self.owner?.channelReadable(self)
            }
        }
        readSource.setCancelHandler(handler: sourceCancelled)
    }

    /// The cancel handlers hold the channel strongly: it must outlive them to close the descriptor.
    private var sourceCancelled: @Sendable () -> Void {
        { [self] in
            self.liveSources -= 1
            guard self.liveSources == 0 else { return }
            if let s = self.secure { s.closeDescriptor() } else { Glibc.close(self.fd) }
        }
    }

    var pendingCount: Int { pending.count }

    /// From now on every read and write goes through `stream`, which takes over the descriptor (a client that
    /// opened TLS to the proxy listener: the bytes above it are the same as on a plain connection). Only before
    /// anything was written and while no other layer is set.
    func layer(_ stream: any SecureStream) {
        assertOnQueue(queue)
        precondition(secure == nil && pending.isEmpty, "a layer goes under a channel before anything is written")
        secure = stream
    }

    /// Frees the send queue's storage once it is empty (an idle connection keeps no buffer).
    func releaseIdleStorage() {
        if pending.isEmpty { pending.releaseStorage() }
    }

    func resumeReading() {
        assertOnQueue(queue)
        guard !isClosed, !readResumed else { return }
        readResumed = true
        readSource.resume()
        if activated {
            // libdispatch drops a descriptor from epoll when a hang-up (EPOLLHUP/EPOLLERR: the peer reset) arrives
            // around a suspend, and the resumed source never fires again: a client that reset in the middle of
            // an upload held back by back-pressure went unnoticed. So look at the socket once now; reading until
            // EAGAIN makes a spurious call harmless.
            queue.async { [self] in
                guard !isClosed, readResumed else { return }
                owner?.channelReadable(self)
            }
        }
        activated = true
    }

    /// Whether the peer reset the connection or it failed (POLLERR/POLLHUP), without reading: for a socket
    /// whose reads are paused, where a reset would otherwise go unseen.
    func peerHungUp() -> Bool {
        assertOnQueue(queue)
        guard !isClosed else { return false }
        var p = pollfd(fd: fd, events: 0, revents: 0)
        return poll(&p, 1, 0) == 1 && p.revents & Int16(POLLERR | POLLHUP) != 0
    }

    func pauseReading() {
        assertOnQueue(queue)
        guard !isClosed, readResumed else { return }
        readResumed = false
        readSource.suspend()
    }

    var isReading: Bool { readResumed }

    enum ReadResult {
        case bytes(Int)
        case wouldBlock
        case eof
        case error(Int32)
    }

    /// One `read(2)` into `buffer` (or one read of the ``secure`` layer).
    func read(into buffer: UnsafeMutableRawBufferPointer) -> ReadResult {
        assertOnQueue(queue)
        if let s = secure { return s.read(into: buffer) }
        while true {
            let n = Glibc.read(fd, buffer.baseAddress, buffer.count)
            if n > 0 { return .bytes(n) }
            if n == 0 { return .eof }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wouldBlock
            default: return .error(errno)
            }
        }
    }

    /// Queues `bytes` and writes what the socket takes now.
    func write(_ bytes: UnsafeRawBufferPointer) {
        assertOnQueue(queue)
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
        armWrite()
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
    /// Both sources watch the connect, the read source registered first. libdispatch keeps one epoll registration
    /// per descriptor: a hang-up (a reset, a refused connect) is handed to the sources registered at that moment,
    /// and the descriptor is dropped from epoll, so a source registered after it never fires. Registered only when
    /// the owner first reads, the read source would miss an upstream's reset that comes right after the request;
    /// and a refused connect can reach the read source before the write source is registered. So whichever source
    /// fires first reports the connect (``connectFinished(readEvent:)``).
    func awaitConnect() {
        awaitingConnect = true
        resumeReading()
        armWrite()
    }

    /// The connect awaited by ``awaitConnect()`` finished (or failed): reported to the owner once. A read event
    /// that comes while the socket is still connecting, with no error, is not an outcome and is ignored.
    private func connectFinished(readEvent: Bool) {
        var err: Int32 = 0
        var len = socklen_t(MemoryLayout<Int32>.size)
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len)
        if readEvent, err == 0 {
            var peer = sockaddr_storage()
            var peerLen = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let connected = withUnsafeMutablePointer(to: &peer) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &peerLen) == 0 }
            }
            guard connected else { return }
        }
        awaitingConnect = false
        if pending.isEmpty, writeResumed {
            writeResumed = false
            writeSource?.suspend()
        }
        owner?.channelConnected(self, error: err)
    }

    /// Cancels both sources; the descriptor is closed when both cancel handlers have run. Nothing is reported
    /// to the owner afterwards.
    func close() {
        assertOnQueue(queue)
        guard !isClosed else { return }
        isClosed = true
        owner = nil
        awaitingConnect = false
        pending.removeAll()
        readSource.cancel()
        // A suspended or never-activated source must be resumed for its cancel handler to run.
        if !readResumed { readSource.resume() }
        if let w = writeSource {
            w.cancel()
            if !writeResumed { w.resume() }
        }
    }

    /// Gives the descriptor away instead of closing it: both sources are cancelled as by ``close()``, and once
    /// their cancel handlers have run `take` gets the descriptor, open, and owns it from then on. Waiting for the
    /// handlers is what lets the taker watch the descriptor with sources of its own: a source made while a
    /// cancelled one is still registered shares its epoll registration and may lose it.
    func relinquish(_ take: @escaping (Int32) -> Void) {
        assertOnQueue(queue)
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
            if n >= 0 { return n }
            failed = true
            pending.removeAll()
            owner?.channelWriteFailed(self, error: e)
            return -1
        }
        while true {
            let n = Glibc.send(fd, bytes.baseAddress, bytes.count, Int32(Glibc.MSG_NOSIGNAL))
            if n >= 0 { return n }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return 0
            default:
                let e = errno
                failed = true
                pending.removeAll()
                owner?.channelWriteFailed(self, error: e)
                return -1
            }
        }
    }

    private func armWrite() {
        guard !isClosed, !writeResumed else { return }
        let w: DispatchSource
        if let existing = writeSource {
            w = existing
        } else {
            w = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue) as! DispatchSource
            w.setEventHandler { [unowned self] in self.writable() }
            w.setCancelHandler(handler: sourceCancelled)
            liveSources += 1
            writeSource = w
        }
        writeResumed = true
        w.resume()
    }

    private func writable() {
        if awaitingConnect {
            connectFinished(readEvent: false)
            return
        }
        while !pending.isEmpty {
            let n = pending.withUnreadBytes { send($0) }
            if n < 0 || isClosed { return }
            if n == 0 { break }
            pending.consume(n)
            lastSendProgress = DispatchTime.now().uptimeNanoseconds
        }
        if pending.isEmpty {
            if writeResumed {
                writeResumed = false
                writeSource?.suspend()
            }
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
/// channel is closed, so nothing is read or written through it; its last cancel handler hands the descriptor
/// over instead of closing it.
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
