#if canImport(Glibc)
    import Glibc
#endif

/// `deny_destinations`: the one rule (``refuses(_:deny:)``), applied where each kind of connection learns its
/// address: the ``Connector``'s ``Dialer`` on the resolved addresses (``allowed(_:deny:)``), libcurl transfers as
/// libcurl opens each socket (``DestinationCheck``), and a route through a parent, which resolves names itself, on
/// an address literal only (``RequestPlanner/tunnelRoute(host:port:routing:denyDestinations:)``).
/// Checking the resolved addresses, not the name, is what stops a name that resolves, or is rebound, into a
/// denied block.
enum DestinationFilter {
    /// Whether `address` may not be connected to.
    static func refuses(_ address: IPAddress, deny: [AddressBlock]) -> Bool {
        !deny.isEmpty && deny.contains(address)
    }

    /// The addresses that may be tried, in order, or the first denied one when none may.
    static func allowed(_ addresses: [(family: Int32, addr: sockaddr_storage, len: socklen_t)], deny: [AddressBlock])
        -> Result<[(family: Int32, addr: sockaddr_storage, len: socklen_t)], DialFailure>
    {
        if deny.isEmpty { return .success(addresses) }
        let kept = addresses.filter { a in IPAddress(a.addr).map { !refuses($0, deny: deny) } ?? false }
        if kept.isEmpty, let first = addresses.first.flatMap({ IPAddress($0.addr) }) { return .failure(.denied(first)) }
        return .success(kept)
    }
}
