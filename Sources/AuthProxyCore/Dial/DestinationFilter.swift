#if canImport(Glibc)
    import Glibc
#endif

/// `deny_destinations` on resolved addresses, in one place for every connection the ``Connector`` makes through its
/// ``Dialer`` (libcurl transfers, which connect themselves, apply the same list as libcurl opens each socket,
/// ``DestinationCheck``).
/// Checking the resolved addresses, not the name, is what stops a name that resolves, or is rebound, into a
/// denied block.
enum DestinationFilter {
    /// The addresses that may be tried, in order, or the first denied one when none may.
    static func allowed(_ addresses: [(family: Int32, addr: sockaddr_storage, len: socklen_t)], deny: [AddressBlock])
        -> Result<[(family: Int32, addr: sockaddr_storage, len: socklen_t)], DialFailure>
    {
        if deny.isEmpty { return .success(addresses) }
        let kept = addresses.filter { a in IPAddress(a.addr).map { !deny.contains($0) } ?? false }
        if kept.isEmpty, let first = addresses.first.flatMap({ IPAddress($0.addr) }) { return .failure(.denied(first)) }
        return .success(kept)
    }
}
