import Dispatch
import Testing

@testable import AuthProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// What a dialed connection's owner hears right after the connect: a refused connect is reported as such, and a
/// reset that comes just after the first write reaches the owner as a readable event (whose read fails). Both
/// depend on how the channel's two Dispatch sources are registered around the connect (``SocketChannel/awaitConnect()``);
/// the reset was missed about once in twenty connections under load, and the exchange waited for its timeout.
@Suite struct DialerConnectionEventTests {
    /// How one dialed connection ended, as its owner saw it.
    private enum Seen: Equatable {
        case refused
        case resetSeen
        case nothingFor2s
        case other(String)
    }

    /// One dial and what came of it; the first outcome counts.
    private final class Attempt: @unchecked Sendable {
        var done: ((Seen) -> Void)?
        var owner: Owner?

        func finish(_ s: Seen) {
            guard let d = done else { return }
            done = nil
            owner?.channel.close()
            owner = nil
            d(s)
        }
    }

    /// The connected channel's owner: reports the first read that is not EAGAIN.
    private final class Owner: SocketChannelOwner {
        let channel: SocketChannel
        unowned let attempt: Attempt

        init(channel: SocketChannel, attempt: Attempt) {
            self.channel = channel
            self.attempt = attempt
        }

        func channelReadable(_ channel: SocketChannel) {
            var buf = [UInt8](repeating: 0, count: 256)
            switch buf.withUnsafeMutableBytes({ channel.read(into: $0) }) {
            case .wouldBlock: return
            case .error, .eof: attempt.finish(.resetSeen)
            case .bytes(let n): attempt.finish(.other("\(n) bytes"))
            }
        }

        func channelDrained(_ channel: SocketChannel) {}
        func channelWriteFailed(_ channel: SocketChannel, error: Int32) { attempt.finish(.resetSeen) }
    }

    /// A loopback listener that reads a few bytes from each connection and then resets it (`SO_LINGER` 0).
    private final class ResettingListener: @unchecked Sendable {
        let fd: Int32
        let port: Int

        init() {
            let s = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var addr = sockaddr_in()
            addr.sin_family = sa_family_t(AF_INET)
            addr.sin_addr.s_addr = inet_addr("127.0.0.1")
            var len = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(s, $0, len) }
            }
            listen(s, 512)
            _ = withUnsafeMutablePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(s, $0, &len) }
            }
            fd = s
            port = Int(UInt16(bigEndian: addr.sin_port))
            let listening = fd
            // One connection at a time is enough: each is read and reset at once.
            DispatchQueue(label: "resetting-listener").async {
                while true {
                    let c = accept(listening, nil, nil)
                    if c < 0 { return }
                    var buf = [UInt8](repeating: 0, count: 64)
                    _ = Glibc.read(c, &buf, buf.count)
                    var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
                    setsockopt(c, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
                    Glibc.close(c)
                }
            }
        }

        func close() { shutdown(fd, Int32(SHUT_RDWR)); Glibc.close(fd) }
    }

    /// Dials `port` `count` times, `concurrent` at a time on one queue, and returns what each owner saw.
    private func dial(port: Int, count: Int, concurrent: Int) async -> [Seen] {
        let queue = DispatchQueue(label: "dialer-events-test")
        var seen: [Seen] = []
        var next = 0
        while next < count {
            let batch = min(concurrent, count - next)
            next += batch
            let results = await withCheckedContinuation { (k: CheckedContinuation<[Seen], Never>) in
                queue.async {
                    var got: [Seen] = []
                    func record(_ s: Seen) {
                        got.append(s)
                        if got.count == batch { k.resume(returning: got) }
                    }
                    for _ in 0..<batch {
                        let d = Dialer(host: "127.0.0.1", port: port, deny: [], queue: queue, keepAlive: false)
                        let attempt = Attempt()
                        attempt.done = record
                        // A connect that is never reported ends the attempt too; this also holds the dialer.
                        let dialer = LoopBound(d, queue: queue)
                        queue.asyncAfter(deadline: .now() + 2) {
                            dialer.value.cancel()
                            attempt.finish(.nothingFor2s)
                        }
                        d.start { outcome in
                            switch outcome {
                            case .failure(.unreachable(let e)) where e == ECONNREFUSED:
                                attempt.finish(.refused)
                            case .failure(let f):
                                attempt.finish(.other("\(f)"))
                            case .success(let channel):
                                let o = Owner(channel: channel, attempt: attempt)
                                // The timer above keeps the owner alive (the channel's reference to it is unowned).
                                attempt.owner = o
                                channel.owner = o
                                channel.resumeReading()
                                channel.write(Array("GET / HTTP/1.1\r\n\r\n".utf8))
                            }
                        }
                    }
                }
            }
            seen += results
        }
        return seen
    }

    @Test func aResetJustAfterTheFirstWriteIsSeenOnEveryConnection() async {
        let listener = ResettingListener()
        defer { listener.close() }
        let seen = await dial(port: listener.port, count: 600, concurrent: 20)
        let missed = seen.filter { $0 != .resetSeen }
        #expect(
            missed.isEmpty, "\(missed.count) of \(seen.count) connections, e.g. \(String(describing: missed.first))")
    }

    @Test func aRefusedConnectIsReportedEveryTime() async {
        // A port nothing listens on: bound, never listening.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { Glibc.close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } }
        _ = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        let seen = await dial(port: Int(UInt16(bigEndian: addr.sin_port)), count: 200, concurrent: 20)
        let missed = seen.filter { $0 != .refused }
        #expect(
            missed.isEmpty, "\(missed.count) of \(seen.count) connections, e.g. \(String(describing: missed.first))")
    }
}
