#if canImport(Glibc)
    import Glibc
#endif

/// An IPv4 or IPv6 address as 16 bytes (IPv4 as an IPv4-mapped IPv6 address, `::ffff:a.b.c.d`), so one
/// comparison covers both families and an IPv4 client seen through a dual-stack socket matches IPv4 rules.
public struct IPAddress: Sendable, Hashable, CustomStringConvertible {
    /// Network byte order.
    public var bytes: (UInt64, UInt64)

    public static func == (a: IPAddress, b: IPAddress) -> Bool { a.bytes == b.bytes }
    public func hash(into h: inout Hasher) {
        h.combine(bytes.0)
        h.combine(bytes.1)
    }

    init(raw: [UInt8]) {
        precondition(raw.count == 16)
        var hi: UInt64 = 0
        var lo: UInt64 = 0
        for i in 0..<8 { hi = hi << 8 | UInt64(raw[i]) }
        for i in 8..<16 { lo = lo << 8 | UInt64(raw[i]) }
        bytes = (hi, lo)
    }

    /// Whether this is an IPv4 address (stored IPv4-mapped).
    public var isIPv4: Bool { bytes.0 == 0 && bytes.1 >> 32 == 0xffff }

    /// Parses a numeric IPv4 or IPv6 address (no brackets, no zone).
    public static func parse(_ text: String) -> IPAddress? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 { return IPAddress(v4: v4) }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 { return IPAddress(v6: v6) }
        return nil
    }

    /// Parses a NUL-terminated numeric address without building a Swift string (libcurl callbacks).
    static func parse(cString text: UnsafePointer<CChar>) -> IPAddress? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 { return IPAddress(v4: v4) }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 { return IPAddress(v6: v6) }
        return nil
    }

    init(v4: in_addr) {
        let a = UInt32(bigEndian: v4.s_addr)
        bytes = (0, 0xffff_0000_0000 | UInt64(a))
    }

    init(v6: in6_addr) {
        var a = v6
        let raw = withUnsafeBytes(of: &a) { Array($0) }
        self.init(raw: raw)
    }

    /// The address of a socket address (IPv4 or IPv6), nil for other families.
    init?(_ sa: UnsafePointer<sockaddr>) {
        switch Int32(sa.pointee.sa_family) {
        case AF_INET:
            self.init(v4: sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr })
        case AF_INET6:
            self.init(v6: sa.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr })
        default:
            return nil
        }
    }

    init?(_ storage: sockaddr_storage) {
        var s = storage
        guard
            let a = withUnsafePointer(
                to: &s, { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { IPAddress($0) } })
        else { return nil }
        self = a
    }

    public var description: String {
        var buf = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        if isIPv4 {
            var a = in_addr(s_addr: UInt32(truncatingIfNeeded: bytes.1).bigEndian)
            inet_ntop(AF_INET, &a, &buf, socklen_t(buf.count))
        } else {
            var a = in6_addr()
            var raw = [UInt8](repeating: 0, count: 16)
            for i in 0..<8 {
                raw[i] = UInt8(truncatingIfNeeded: bytes.0 >> (56 - 8 * UInt64(i)))
                raw[8 + i] = UInt8(truncatingIfNeeded: bytes.1 >> (56 - 8 * UInt64(i)))
            }
            withUnsafeMutableBytes(of: &a) { $0.copyBytes(from: raw) }
            inet_ntop(AF_INET6, &a, &buf, socklen_t(buf.count))
        }
        return String(nulTerminated: buf)
    }
}
