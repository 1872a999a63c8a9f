// Socket set-up shared by the two floors (bench/floor and bench/floor-tls): loopback only, nothing per request.
import Glibc

/// Prints `msg` and the current errno to stderr, prefixed with the program's name, and exits 1.
public func fail(_ msg: String) -> Never {
    let program = CommandLine.arguments.first.map { $0.split(separator: "/").last.map(String.init) ?? $0 } ?? "floor"
    fputs("\(program): \(msg): \(String(cString: strerror(errno)))\n", stderr)
    exit(1)
}

public func setNonBlocking(_ fd: Int32) {
    let flags = fcntl(fd, F_GETFL)
    _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
}

public func setNoDelay(_ fd: Int32) {
    var one: Int32 = 1
    _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
}

/// 127.0.0.1:`port`.
public func loopback(_ port: UInt16) -> sockaddr_in {
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_port = port.bigEndian
    addr.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
    return addr
}

/// A non-blocking socket listening on 127.0.0.1:`port` (SO_REUSEADDR, backlog 1024); exits on failure.
public func listenOnLoopback(_ port: UInt16) -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    if fd < 0 { fail("socket") }
    var one: Int32 = 1
    _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
    var addr = loopback(port)
    let bound = withUnsafePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    if bound != 0 { fail("bind 127.0.0.1:\(port)") }
    if listen(fd, 1024) != 0 { fail("listen") }
    setNonBlocking(fd)
    return fd
}

/// A connected, non-blocking, TCP_NODELAY socket to 127.0.0.1:`port`, or nil. The connect blocks: on loopback it
/// completes at once, and the floors make one per client connection.
public func connectToLoopback(_ port: UInt16) -> Int32? {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    if fd < 0 { return nil }
    var addr = loopback(port)
    let rc = withUnsafePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    if rc != 0 { close(fd); return nil }
    setNonBlocking(fd)
    setNoDelay(fd)
    return fd
}
