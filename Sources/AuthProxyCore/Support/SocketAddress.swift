import CAuthProxyShims

#if canImport(Glibc)
    import Glibc
#endif

/// Whether `host` is a numeric IPv4 or IPv6 address.
func isNumericAddress(_ host: String) -> Bool {
    var v4 = in_addr()
    var v6 = in6_addr()
    return inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1
}

/// The numeric address and port of an IPv4 or IPv6 socket address (IPv6 without brackets); nil for another family.
private func numericAddress(_ storage: sockaddr_storage) -> (ip: String, port: UInt16, v6: Bool)? {
    var s = storage
    var buf = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
    switch Int32(s.ss_family) {
    case AF_INET:
        return withUnsafePointer(to: &s) {
            $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin in
                var addr = sin.pointee.sin_addr
                guard inet_ntop(AF_INET, &addr, &buf, socklen_t(buf.count)) != nil else { return nil }
                return (String(nulTerminated: buf), UInt16(bigEndian: sin.pointee.sin_port), false)
            }
        }
    case AF_INET6:
        return withUnsafePointer(to: &s) {
            $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { sin in
                var addr = sin.pointee.sin6_addr
                guard inet_ntop(AF_INET6, &addr, &buf, socklen_t(buf.count)) != nil else { return nil }
                return (String(nulTerminated: buf), UInt16(bigEndian: sin.pointee.sin6_port), true)
            }
        }
    default:
        return nil
    }
}

/// A peer address as `ip:port` (IPv6 in brackets), for logs.
func describePeer(_ storage: sockaddr_storage) -> String {
    guard let a = numericAddress(storage) else { return "unknown" }
    return a.v6 ? "[\(a.ip)]:\(a.port)" : "\(a.ip):\(a.port)"
}

/// The local IP address of connected socket `fd` (no port, IPv6 without brackets): the address a client
/// connected to, which a listener on a wildcard address does not know otherwise. nil when it cannot be read.
func localIPAddress(of fd: Int32) -> String? {
    var storage = sockaddr_storage()
    var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
    let ok = withUnsafeMutablePointer(to: &storage) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } == 0
    }
    guard ok else { return nil }
    return numericAddress(storage)?.ip
}
