// floor: the cheapest keep-alive HTTP relay we can build on Dispatch sources on Linux.
//
//   floor LISTEN_PORT UPSTREAM_PORT        (both on 127.0.0.1)
//
// It is the floor for a Dispatch-source server in bench/run.sh: whatever authproxy spends per
// request above this is its own work, not libdispatch's. Deliberately minimal:
//   - one serial queue for everything; no async hops between a source handler and the work;
//   - one DispatchSourceRead per socket, kept armed; each wake-up reads until EAGAIN;
//   - write-through: bytes are sent from the handler that read them; a DispatchSourceWrite is
//     created only when a send would block, and cancelled once its backlog is drained (the
//     source reading the other side is suspended meanwhile: back-pressure);
//   - one upstream keep-alive connection per client connection, opened when the client connects;
//   - HTTP "parsing" is only: find the end of each request head (requests are assumed to have no
//     body), and frame each response by its Content-Length (no Content-Length: relay until close).
// No libcurl, no header rewriting, no allocations per request on the fast path.
import Dispatch
import FloorKit
import Glibc

let queue = DispatchQueue(label: "floor")
let scratchSize = 64 * 1024
let scratch = UnsafeMutablePointer<UInt8>.allocate(capacity: scratchSize)  // used on `queue` only

/// One socket: its read source, an optional write source and the bytes waiting to be sent to it.
final class Side {
    let fd: Int32
    var readSource: DispatchSourceRead?
    var readSuspended = false
    var writeSource: DispatchSourceWrite?
    var backlog: [UInt8] = []
    var backlogOffset = 0
    var liveSources = 0
    var fdClosed = false

    init(fd: Int32) { self.fd = fd }

    var hasBacklog: Bool { backlogOffset < backlog.count }

    /// Called from each source's cancel handler: the fd is closed only once no source watches it.
    func sourceGone() {
        liveSources -= 1
        if liveSources == 0 && !fdClosed {
            fdClosed = true
            close(fd)
        }
    }

    func suspendRead() {
        if let s = readSource, !readSuspended { s.suspend(); readSuspended = true }
    }

    func resumeRead() {
        if let s = readSource, readSuspended { readSuspended = false; s.resume() }
    }
}

let crlfcrlf: [UInt8] = [13, 10, 13, 10]

final class Relay {
    let client: Side
    let upstream: Side
    var closed = false

    // Request side: bytes of an incomplete request head.
    var reqBuf: [UInt8] = []
    // Response side: framing state.
    var respInHead = true
    var respHead: [UInt8] = []
    var bodyLeft = 0  // Int.max: no Content-Length, relay until the upstream closes

    init(clientFD: Int32, upstreamFD: Int32) {
        client = Side(fd: clientFD)
        upstream = Side(fd: upstreamFD)
        reqBuf.reserveCapacity(4096)
        respHead.reserveCapacity(4096)
    }

    func start() {
        arm(read: client) { [unowned self] in self.clientReadable() }
        arm(read: upstream) { [unowned self] in self.upstreamReadable() }
    }

    private func arm(read side: Side, _ handler: @escaping () -> Void) {
        let s = DispatchSource.makeReadSource(fileDescriptor: side.fd, queue: queue)
        side.liveSources += 1
        s.setEventHandler(handler: handler)
        // The cancel handler keeps the relay alive until both sockets are closed.
        s.setCancelHandler { side.sourceGone(); _ = self }
        side.readSource = s
        s.resume()
    }

    func shutdown() {
        if closed { return }
        closed = true
        for side in [client, upstream] {
            if let w = side.writeSource { w.cancel(); side.writeSource = nil }
            if let r = side.readSource {
                r.cancel()
                if side.readSuspended { side.readSuspended = false; r.resume() }
                side.readSource = nil
            }
        }
    }

    // MARK: reading

    /// Reads until EAGAIN; hands each chunk to `consume`. Stops early when `stop()` says so
    /// (the other side has a backlog); the source stays suspended until the backlog drains.
    private func drain(_ side: Side, consume: (Int) -> Void, stop: () -> Bool) {
        while !closed {
            let n = read(side.fd, scratch, scratchSize)
            if n > 0 {
                consume(n)
                if closed { return }
                if stop() { side.suspendRead(); return }
            } else if n == 0 {
                shutdown(); return
            } else {
                if errno == EINTR { continue }
                if errno == EAGAIN || errno == EWOULDBLOCK { return }
                shutdown(); return
            }
        }
    }

    func clientReadable() {
        drain(client, consume: clientBytes, stop: { self.upstream.hasBacklog })
    }

    func upstreamReadable() {
        drain(upstream, consume: upstreamBytes, stop: { self.client.hasBacklog })
    }

    /// Forwards every complete request head; keeps an incomplete one for the next read.
    private func clientBytes(_ n: Int) {
        if reqBuf.isEmpty {
            // Fast path: the chunk is one or more complete heads.
            if n >= 4 && scratch[n - 4] == 13 && scratch[n - 3] == 10 && scratch[n - 2] == 13 && scratch[n - 1] == 10 {
                send(to: upstream, scratch, n)
                return
            }
            let end = lastHeadEnd(UnsafeBufferPointer(start: scratch, count: n), from: 0)
            if end > 0 { send(to: upstream, scratch, end) }
            reqBuf.append(contentsOf: UnsafeBufferPointer(start: scratch + end, count: n - end))
            return
        }
        let scanFrom = max(0, reqBuf.count - 3)
        reqBuf.append(contentsOf: UnsafeBufferPointer(start: scratch, count: n))
        let end = reqBuf.withUnsafeBufferPointer { lastHeadEnd($0, from: scanFrom) }
        if end > 0 {
            reqBuf.withUnsafeBufferPointer { send(to: upstream, UnsafeMutablePointer(mutating: $0.baseAddress!), end) }
            reqBuf.removeFirst(end)
        }
        if reqBuf.count > 64 * 1024 { shutdown() }  // no head end in 64 KiB: give up
    }

    /// Tracks response framing (head, then Content-Length bytes of body) and relays the chunk as is.
    private func upstreamBytes(_ n: Int) {
        var i = 0
        while i < n {
            if respInHead {
                let scanFrom = max(0, respHead.count - 3)
                let before = respHead.count
                respHead.append(contentsOf: UnsafeBufferPointer(start: scratch + i, count: n - i))
                let end = respHead.withUnsafeBufferPointer { firstHeadEnd($0, from: scanFrom) }
                if end < 0 {
                    if respHead.count > 64 * 1024 { shutdown(); return }
                    i = n
                } else {
                    let cl = respHead.withUnsafeBufferPointer { contentLength($0, end) }
                    i += end - before
                    respHead.removeAll(keepingCapacity: true)
                    if let cl = cl { bodyLeft = cl } else { bodyLeft = Int.max }
                    respInHead = bodyLeft == 0
                }
            } else {
                let take = min(bodyLeft, n - i)
                if bodyLeft != Int.max { bodyLeft -= take }
                i += take
                if bodyLeft == 0 { respInHead = true }
            }
        }
        send(to: client, scratch, n)
    }

    // MARK: writing

    /// Write-through; on EAGAIN keep the rest and create a write source for this socket.
    private func send(to side: Side, _ p: UnsafeMutablePointer<UInt8>, _ n: Int) {
        if side.hasBacklog {
            side.backlog.append(contentsOf: UnsafeBufferPointer(start: p, count: n))
            return
        }
        var off = 0
        while off < n {
            let w = Glibc.send(side.fd, p + off, n - off, Int32(MSG_NOSIGNAL))
            if w > 0 { off += w; continue }
            if w < 0 && errno == EINTR { continue }
            if w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { break }
            shutdown(); return
        }
        if off == n { return }
        side.backlog.removeAll(keepingCapacity: true)
        side.backlogOffset = 0
        side.backlog.append(contentsOf: UnsafeBufferPointer(start: p + off, count: n - off))
        let s = DispatchSource.makeWriteSource(fileDescriptor: side.fd, queue: queue)
        side.liveSources += 1
        s.setEventHandler { [unowned self] in self.writable(side) }
        s.setCancelHandler { side.sourceGone(); _ = self }
        side.writeSource = s
        s.resume()
    }

    private func writable(_ side: Side) {
        if closed { return }
        while side.hasBacklog {
            let w = side.backlog.withUnsafeBufferPointer {
                Glibc.send(side.fd, $0.baseAddress! + side.backlogOffset, side.backlog.count - side.backlogOffset, Int32(MSG_NOSIGNAL))
            }
            if w > 0 { side.backlogOffset += w; continue }
            if w < 0 && errno == EINTR { continue }
            if w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return }
            shutdown(); return
        }
        side.backlog.removeAll(keepingCapacity: true)
        side.backlogOffset = 0
        side.writeSource?.cancel()
        side.writeSource = nil
        // Resume the reader that was feeding this socket.
        let other = side === client ? upstream : client
        other.resumeRead()
    }
}

// MARK: main

let args = CommandLine.arguments
guard args.count == 3, let listenPort = UInt16(args[1]), let upstreamPort = UInt16(args[2]) else {
    fputs("usage: floor LISTEN_PORT UPSTREAM_PORT   (both on 127.0.0.1)\n", stderr)
    exit(2)
}
signal(SIGPIPE, SIG_IGN)

let listenFD = listenOnLoopback(listenPort)

let acceptSource = DispatchSource.makeReadSource(fileDescriptor: listenFD, queue: queue)
acceptSource.setEventHandler {
    while true {
        let fd = accept(listenFD, nil, nil)
        if fd < 0 {
            if errno == EINTR { continue }
            return  // EAGAIN, or out of fds: try again on the next wake-up
        }
        setNonBlocking(fd)
        setNoDelay(fd)
        guard let up = connectToLoopback(upstreamPort) else { close(fd); continue }
        Relay(clientFD: fd, upstreamFD: up).start()
    }
}
acceptSource.resume()
fputs("floor: 127.0.0.1:\(listenPort) -> 127.0.0.1:\(upstreamPort)\n", stderr)
dispatchMain()
