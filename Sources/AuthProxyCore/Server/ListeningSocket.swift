import CAuthProxyShims
import Dispatch

#if canImport(Glibc)
    import Glibc
#endif

/// A non-blocking, close-on-exec TCP socket bound to `address` and listening (IPv6 sockets are v6-only), and the
/// port it got (differs from `address.port` for port 0). Used by the proxy's and the admin listener.
func openListeningSocket(_ address: ListenAddress) throws(ServerError) -> (fd: Int32, port: Int) {
    let family = address.isIPv6 ? AF_INET6 : AF_INET
    let fd = socket(
        family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { throw ServerError.listen(address, errno) }
    var one: Int32 = 1
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
    if address.isIPv6 { setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(MemoryLayout<Int32>.size)) }
    var storage = sockaddr_storage()
    let len: socklen_t
    if address.isIPv6 {
        var sin6 = sockaddr_in6()
        sin6.sin6_family = sa_family_t(AF_INET6)
        sin6.sin6_port = in_port_t(UInt16(address.port).bigEndian)
        inet_pton(AF_INET6, address.host, &sin6.sin6_addr)
        withUnsafeMutableBytes(of: &storage) { $0.storeBytes(of: sin6, as: sockaddr_in6.self) }
        len = socklen_t(MemoryLayout<sockaddr_in6>.size)
    } else {
        var sin = sockaddr_in()
        sin.sin_family = sa_family_t(AF_INET)
        sin.sin_port = in_port_t(UInt16(address.port).bigEndian)
        inet_pton(AF_INET, address.host, &sin.sin_addr)
        withUnsafeMutableBytes(of: &storage) { $0.storeBytes(of: sin, as: sockaddr_in.self) }
        len = socklen_t(MemoryLayout<sockaddr_in>.size)
    }
    let rc = withUnsafePointer(to: &storage) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) }
    }
    guard rc == 0, Glibc.listen(fd, 1024) == 0 else {
        let e = errno
        Glibc.close(fd)
        throw ServerError.listen(address, e)
    }
    var bound = sockaddr_storage()
    var blen = socklen_t(MemoryLayout<sockaddr_storage>.size)
    withUnsafeMutablePointer(to: &bound) {
        _ = $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &blen) }
    }
    return (fd, Int(describePeer(bound).split(separator: ":").last.flatMap { Int($0) } ?? address.port))
}

/// The read source that accepts on the listening socket `fd`, resumed: `accept` runs on `queue` while connections
/// wait; cancelling the source closes the socket. Made when a listener starts, not when it is opened, so one that
/// never starts leaves no inactive Dispatch source behind (releasing one crashes).
func startAcceptSource(fd: Int32, queue: DispatchQueue, accept: @escaping () -> Void) -> any DispatchSourceRead {
    let s = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
    s.setEventHandler(handler: accept)
    s.setCancelHandler { Glibc.close(fd) }
    s.resume()
    return s
}
