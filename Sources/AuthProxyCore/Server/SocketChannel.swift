import Dispatch
#if canImport(Glibc)
import Glibc
#endif

/// A non-blocking stream socket driven by one read and one write Dispatch source on its event loop's queue.
///
/// Writes go straight to the socket; what the kernel does not take waits in ``pending`` and the write source
/// drains it. The write source is made only when a `send` would block (or a connect is awaited): most
/// connections never need one, and an unused source still costs its allocation and, when the connection closes,
/// an activation just to be cancelled. Owners apply back-pressure by watching ``pendingCount`` and pausing their producer, and by
/// ``pauseReading()``/``resumeReading()``. The descriptor is closed only after both sources' cancel handlers
/// have run, so a new socket can never reuse the number while an old source still watches it.
///
/// Confined to `queue`: every method must be called on it (`@unchecked Sendable` only so Dispatch handlers
/// may capture it).
final class SocketChannel: @unchecked Sendable {
    let fd: Int32
    private let queue: DispatchQueue
    private let readSource: any DispatchSourceRead
    /// Made by ``armWrite()`` the first time it is needed.
    private var writeSource: (any DispatchSourceWrite)?
    private var readResumed = false
    /// The read source was resumed before: a later resume follows a pause, not the first activation.
    private var activated = false
    private var writeResumed = false
    private var pending = ByteBuffer()
    private var shutdownWhenFlushed = false
    /// Sources whose cancel handler has not run yet; the descriptor is closed when this reaches 0.
    private var liveSources = 1
    private(set) var isClosed = false
    /// Whether the peer's side or ours failed: writes are dropped from then on.
    private(set) var failed = false

    /// Called when the socket has bytes (or EOF) to read.
    var onReadable: (() -> Void)?
    /// Called when ``pendingCount`` fell to or below ``lowWater`` after having been above it, and when all pending
    /// bytes are written.
    var onDrained: (() -> Void)?
    /// Called once when a write fails (peer reset or gone).
    var onWriteError: ((Int32) -> Void)?
    /// One-shot: called when the socket first becomes writable (non-blocking connect finished).
    private var onConnected: ((Int32) -> Void)?

    var lowWater = 64 * 1024
    /// When a send last moved bytes (uptime ns): a slow but steady reader is not idle.
    private(set) var lastSendProgress: UInt64 = 0
    private var wasAboveLowWater = false

    init(fd: Int32, queue: DispatchQueue) {
        self.fd = fd
        self.queue = queue
        readSource = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        readSource.setEventHandler { [unowned self] in self.onReadable?() }
        readSource.setCancelHandler(handler: sourceCancelled)
    }

    /// The cancel handlers hold the channel strongly: it must outlive them to close the descriptor.
    private var sourceCancelled: @Sendable () -> Void {
        { [self] in
            self.liveSources -= 1
            if self.liveSources == 0 { Glibc.close(self.fd) }
        }
    }

    var pendingCount: Int { pending.count }

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
                onReadable?()
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

    /// One `read(2)` into `buffer`.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> ReadResult {
        assertOnQueue(queue)
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
        if pending.count > lowWater { wasAboveLowWater = true }
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
            Glibc.shutdown(fd, Int32(SHUT_WR))
        } else {
            shutdownWhenFlushed = true
        }
    }

    /// Waits for a non-blocking `connect(2)` to finish; `done` gets 0 or the socket error.
    func awaitConnect(_ done: @escaping (Int32) -> Void) {
        onConnected = done
        armWrite()
    }

    /// Cancels both sources; the descriptor is closed when both cancel handlers have run.
    func close() {
        assertOnQueue(queue)
        guard !isClosed else { return }
        isClosed = true
        onReadable = nil
        onDrained = nil
        onWriteError = nil
        onConnected = nil
        pending.removeAll()
        readSource.cancel()
        // A suspended or never-activated source must be resumed for its cancel handler to run.
        if !readResumed { readSource.resume() }
        if let w = writeSource {
            w.cancel()
            if !writeResumed { w.resume() }
        }
    }

    /// Sends with MSG_NOSIGNAL; returns bytes written (0 on EAGAIN) or -1 after reporting the error.
    private func send(_ bytes: UnsafeRawBufferPointer) -> Int {
        while true {
            let n = Glibc.send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL))
            if n >= 0 { return n }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return 0
            default:
                let e = errno
                failed = true
                pending.removeAll()
                onWriteError?(e)
                return -1
            }
        }
    }

    private func armWrite() {
        guard !isClosed, !writeResumed else { return }
        let w: any DispatchSourceWrite
        if let existing = writeSource {
            w = existing
        } else {
            w = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
            w.setEventHandler { [unowned self] in self.writable() }
            w.setCancelHandler(handler: sourceCancelled)
            liveSources += 1
            writeSource = w
        }
        writeResumed = true
        w.resume()
    }

    private func writable() {
        if let connected = onConnected {
            onConnected = nil
            var err: Int32 = 0
            var len = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len)
            if pending.isEmpty, writeResumed {
                writeResumed = false
                writeSource?.suspend()
            }
            connected(err)
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
                Glibc.shutdown(fd, Int32(SHUT_WR))
            }
        }
        if pending.isEmpty || (wasAboveLowWater && pending.count <= lowWater) {
            wasAboveLowWater = false
            onDrained?()
        }
    }
}
