import Dispatch
import Testing

@testable import AuthProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// A channel that gives its descriptor away (the Dialer's socket handed to libcurl) closes nothing: the taker
/// gets the descriptor once, open, after both of the channel's sources are gone.
@Suite struct SocketChannelRelinquishTests {
    private final class Takes: @unchecked Sendable {
        var fds: [Int32] = []
    }

    private func pair() -> (Int32, Int32) {
        var fds: [Int32] = [-1, -1]
        let rc = socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0, &fds)
        precondition(rc == 0)
        return (fds[0], fds[1])
    }

    /// Relinquishes a channel on `fd` after `prepare`, and returns every descriptor its taker got once the
    /// queue has run everything that followed.
    private func relinquish(_ fd: Int32, prepare: @escaping @Sendable (SocketChannel) -> Void) async -> [Int32] {
        let queue = DispatchQueue(label: "relinquish-test")
        let takes = Takes()
        await withCheckedContinuation { (k: CheckedContinuation<Void, Never>) in
            queue.async {
                let channel = SocketChannel(fd: fd, queue: queue)
                prepare(channel)
                channel.relinquish { fd in
                    takes.fds.append(fd)
                    k.resume()
                }
                // Already closed: a second hand-over does nothing.
                channel.relinquish { takes.fds.append($0) }
            }
        }
        // Anything still queued (a late cancel handler) has run after this.
        await withCheckedContinuation { (k: CheckedContinuation<Void, Never>) in
            queue.asyncAfter(deadline: .now() + .milliseconds(50)) { k.resume() }
        }
        return takes.fds
    }

    private func stillCarries(_ fd: Int32, to peer: Int32) -> Bool {
        guard fcntl(fd, F_GETFD) != -1 else { return false }
        var byte: UInt8 = 0x2a
        guard Glibc.write(fd, &byte, 1) == 1 else { return false }
        var got: UInt8 = 0
        var p = pollfd(fd: peer, events: Int16(POLLIN), revents: 0)
        _ = poll(&p, 1, 1000)
        return Glibc.read(peer, &got, 1) == 1 && got == 0x2a
    }

    @Test func aReadingChannelHandsOverAnOpenDescriptorOnce() async {
        let (a, b) = pair()
        defer { Glibc.close(b) }
        let taken = await relinquish(a) { $0.resumeReading() }
        #expect(taken == [a])
        #expect(stillCarries(a, to: b))
        Glibc.close(a)
    }

    @Test func aChannelWithAWriteSourceHandsOverOnlyAfterBothSourcesAreGone() async {
        let (a, b) = pair()
        defer { Glibc.close(b) }
        // More than the socket takes: the rest waits behind a write source, which is dropped with the channel.
        let taken = await relinquish(a) { channel in
            channel.write([UInt8](repeating: 0, count: 4 << 20))
            #expect(channel.pendingCount > 0)
        }
        #expect(taken == [a])
        // Drain what the kernel took, then the descriptor still works.
        var sink = [UInt8](repeating: 0, count: 1 << 16)
        while Glibc.read(b, &sink, sink.count) > 0 {}
        #expect(stillCarries(a, to: b))
        Glibc.close(a)
    }
}
