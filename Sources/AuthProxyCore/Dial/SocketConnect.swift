import CAuthProxyShims

#if canImport(Glibc)
    import Glibc
#endif

/// How starting a connect went (``startConnect(to:keepAlive:)``).
enum ConnectStart {
    /// The socket is connecting (or connected): wait for it to become writable.
    case connecting(Int32)
    /// This address failed at once (the errno): try the next.
    case failed(Int32)
    /// No descriptor for a socket (EMFILE/ENFILE): the proxy's own failure.
    case outOfDescriptors(Int32)
}

/// Opens a non-blocking TCP socket to `address` (`TCP_NODELAY`, and `SO_KEEPALIVE` for connections kept in a
/// pool) and starts connecting it, for tunnels and the own HTTP/1.1 client alike.
func startConnect(to address: (family: Int32, addr: sockaddr_storage, len: socklen_t), keepAlive: Bool) -> ConnectStart
{
    var a = address
    let fd = socket(
        a.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else {
        let e = errno
        return DescriptorExhaustion.isExhaustion(e) ? .outOfDescriptors(e) : .failed(e)
    }
    var one: Int32 = 1
    setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    if keepAlive { setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, socklen_t(MemoryLayout<Int32>.size)) }
    let rc = withUnsafePointer(to: &a.addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, a.len) }
    }
    if rc != 0 && errno != EINPROGRESS {
        let e = errno
        Glibc.close(fd)
        return .failed(e)
    }
    return .connecting(fd)
}

enum ResolveResult: Sendable {
    case success([(family: Int32, addr: sockaddr_storage, len: socklen_t)])
    case failure(String)
    /// The lookup itself could not open a descriptor (EMFILE/ENFILE).
    case outOfDescriptors(Int32)
}

/// Blocking name resolution (numeric hosts too), for the tunnel's own connects.
func resolve(host: String, port: Int) -> ResolveResult {
    var hints = addrinfo()
    hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
    hints.ai_family = AF_UNSPEC
    var res: UnsafeMutablePointer<addrinfo>? = nil
    let rc = getaddrinfo(host, String(port), &hints, &res)
    if rc == EAI_SYSTEM, DescriptorExhaustion.isExhaustion(errno) { return .outOfDescriptors(errno) }
    guard rc == 0, let first = res else { return .failure(String(cString: gai_strerror(rc))) }
    defer { freeaddrinfo(first) }
    var out: [(family: Int32, addr: sockaddr_storage, len: socklen_t)] = []
    var p: UnsafeMutablePointer<addrinfo>? = first
    while let ai = p {
        var storage = sockaddr_storage()
        withUnsafeMutableBytes(of: &storage) { dst in
            dst.copyMemory(from: UnsafeRawBufferPointer(start: ai.pointee.ai_addr, count: Int(ai.pointee.ai_addrlen)))
        }
        out.append((ai.pointee.ai_family, storage, ai.pointee.ai_addrlen))
        p = ai.pointee.ai_next
    }
    return out.isEmpty ? .failure("no addresses") : .success(out)
}

/// `host` when it is an IP literal, as a socket address (no lookup, no hop off the loop).
func numericAddress(_ host: String, port: Int) -> (family: Int32, addr: sockaddr_storage, len: socklen_t)? {
    var storage = sockaddr_storage()
    let p = UInt16(port).bigEndian
    let ok: socklen_t? = withUnsafeMutableBytes(of: &storage) { raw in
        if host.utf8.contains(58) {
            let sa = raw.baseAddress!.assumingMemoryBound(to: sockaddr_in6.self)
            guard inet_pton(AF_INET6, host, &sa.pointee.sin6_addr) == 1 else { return nil }
            sa.pointee.sin6_family = sa_family_t(AF_INET6)
            sa.pointee.sin6_port = p
            return socklen_t(MemoryLayout<sockaddr_in6>.size)
        }
        let sa = raw.baseAddress!.assumingMemoryBound(to: sockaddr_in.self)
        guard inet_pton(AF_INET, host, &sa.pointee.sin_addr) == 1 else { return nil }
        sa.pointee.sin_family = sa_family_t(AF_INET)
        sa.pointee.sin_port = p
        return socklen_t(MemoryLayout<sockaddr_in>.size)
    }
    guard let len = ok else { return nil }
    return (Int32(storage.ss_family), storage, len)
}
