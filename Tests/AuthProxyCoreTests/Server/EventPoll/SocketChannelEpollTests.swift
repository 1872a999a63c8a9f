import Dispatch
import Testing

@testable import AuthProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// A channel registered edge-triggered in its queue's epoll set keeps the level-triggered contract its owners
/// were written for (real sockets: a Unix stream pair).
@Suite struct SocketChannelEpollTests {
    /// Reads at most `chunk` bytes per `channelReadable`, as an owner that stops early does.
    final class Owner: SocketChannelOwner, @unchecked Sendable {
        let chunk: Int
        var received: [UInt8] = []
        var deliveries = 0
        var eofs = 0
        var drains = 0
        var pauseAfter: Int?
        init(chunk: Int) { self.chunk = chunk }

        func channelReadable(_ channel: SocketChannel) {
            deliveries += 1
            var buf = [UInt8](repeating: 0, count: chunk)
            let r = buf.withUnsafeMutableBytes { channel.read(into: $0) }
            switch r {
            case .bytes(let n): received += buf[0..<n]
            case .eof: eofs += 1
            case .wouldBlock, .error: break
            }
            if let p = pauseAfter, received.count >= p { channel.pauseReading() }
        }
        func channelDrained(_ channel: SocketChannel) { drains += 1 }
        func channelWriteFailed(_ channel: SocketChannel, error: Int32) {}
    }

    func pair() -> (Int32, Int32) {
        var fds: [Int32] = [-1, -1]
        let rc = socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0, &fds)
        precondition(rc == 0)
        return (fds[0], fds[1])
    }

    /// Polls `condition` on `queue` every 10 ms for at most 10 s.
    func eventually(on queue: DispatchQueue, _ condition: @escaping @Sendable () -> Bool) async -> Bool {
        for _ in 0..<1000 {
            if queue.sync(execute: condition) { return true }
            try? await Task.sleep(nanoseconds: 10_000_000)
        }
        return false
    }

    @Test func everyByteReachesAnOwnerThatReadsLessThanIsThere() async {
        let (a, b) = pair()
        defer { Glibc.close(b) }
        let queue = DispatchQueue(label: "epoll-test-level")
        let owner = Owner(chunk: 7)
        let channel = queue.sync {
            let c = SocketChannel(fd: a, queue: queue, owner: owner)
            c.resumeReading()
            return c
        }
        // One edge for 1,000 bytes: the owner's 7-byte reads are delivered again until all are read.
        let bytes = (0..<1000).map { UInt8(truncatingIfNeeded: $0) }
        #expect(bytes.withUnsafeBytes { Glibc.write(b, $0.baseAddress, $0.count) } == 1000)
        #expect(await eventually(on: queue) { owner.received.count == 1000 })
        #expect(queue.sync { owner.received } == bytes)
        #expect(queue.sync { owner.deliveries } >= 143)
        queue.sync { channel.close() }
    }

    @Test func inputThatCameWhilePausedIsDeliveredOnResume() async {
        let (a, b) = pair()
        defer { Glibc.close(b) }
        let queue = DispatchQueue(label: "epoll-test-pause")
        let owner = Owner(chunk: 4096)
        let channel = queue.sync { SocketChannel(fd: a, queue: queue, owner: owner) }
        var byte: UInt8 = 1
        #expect(Glibc.write(b, &byte, 1) == 1)
        // Not reading yet: the edge is recorded, nothing is delivered.
        try? await Task.sleep(nanoseconds: 100_000_000)
        #expect(queue.sync { owner.deliveries } == 0)
        queue.sync { channel.resumeReading() }
        #expect(await eventually(on: queue) { owner.received == [1] })
        // Paused again, then the peer closes: the end is delivered on the next resume.
        queue.sync { channel.pauseReading() }
        Glibc.shutdown(b, Int32(SHUT_WR))
        try? await Task.sleep(nanoseconds: 100_000_000)
        #expect(queue.sync { owner.eofs } == 0)
        queue.sync { channel.resumeReading() }
        #expect(await eventually(on: queue) { owner.eofs >= 1 })
        // EOF with reading still on is not delivered again and again.
        try? await Task.sleep(nanoseconds: 100_000_000)
        #expect(queue.sync { owner.eofs } == 1)
        queue.sync { channel.close() }
    }

    @Test func aClosedChannelGetsNoEventAndItsDescriptorIsClosed() async {
        let (a, b) = pair()
        defer { Glibc.close(b) }
        let queue = DispatchQueue(label: "epoll-test-close")
        let owner = Owner(chunk: 4096)
        queue.sync {
            let c = SocketChannel(fd: a, queue: queue, owner: owner)
            c.resumeReading()
            c.close()
        }
        var byte: UInt8 = 1
        // MSG_NOSIGNAL: the descriptor may be closed already.
        _ = Glibc.send(b, &byte, 1, Int32(MSG_NOSIGNAL))
        // The descriptor is closed on the queue's next turn: the peer sees the end.
        #expect(await eventually(on: queue) { fcntl(a, F_GETFD) == -1 })
        #expect(queue.sync { owner.deliveries } == 0)
    }

    @Test func aQueuedSendGoesOutWhenThePeerReadsAndTheDrainIsReported() async {
        let (a, b) = pair()
        defer { Glibc.close(b) }
        let queue = DispatchQueue(label: "epoll-test-write")
        let owner = Owner(chunk: 4096)
        let total = 4 << 20
        let channel = queue.sync {
            let c = SocketChannel(fd: a, queue: queue, owner: owner)
            c.write([UInt8](repeating: 0x5a, count: total))
            return c
        }
        #expect(queue.sync { channel.pendingCount } > 0)
        var got = 0
        var sink = [UInt8](repeating: 0, count: 1 << 16)
        for _ in 0..<20_000 where got < total {
            let n = Glibc.read(b, &sink, sink.count)
            if n > 0 {
                got += n
            } else {
                try? await Task.sleep(nanoseconds: 1_000_000)
            }
        }
        #expect(got == total)
        #expect(await eventually(on: queue) { channel.pendingCount == 0 && owner.drains >= 1 })
        queue.sync { channel.close() }
    }
}

extension SocketChannelEpollTests {
    @Test func anEndThatArrivedWithTheLastBytesReachesAnOwnerThatStopsAtAShortRead() async {
        let (a, b) = pair()
        let queue = DispatchQueue(label: "epoll-test-fin")
        let owner = Owner(chunk: 4096)
        let bytes: [UInt8] = [1, 2, 3]
        // Bytes and FIN are both queued before the socket is first watched: one edge for both.
        #expect(bytes.withUnsafeBytes { Glibc.write(b, $0.baseAddress, $0.count) } == 3)
        Glibc.close(b)
        let channel = queue.sync {
            let c = SocketChannel(fd: a, queue: queue, owner: owner)
            c.resumeReading()
            return c
        }
        #expect(await eventually(on: queue) { owner.eofs == 1 })
        #expect(queue.sync { owner.received } == bytes)
        queue.sync { channel.close() }
    }
}
