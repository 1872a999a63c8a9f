/// Why the ``Dialer`` could not connect, in the proxy's own terms (each path maps it to its answer: a tunnel to an
/// ``ErrorResponse``, an HTTP exchange to an ``UpstreamError``).
enum DialFailure: Error, Equatable {
    /// Every resolved address is in `deny_destinations`; the first one.
    case denied(IPAddress)
    /// The name did not resolve (the resolver's message).
    case unresolved(String)
    /// No address accepted a connection (the last errno).
    case unreachable(Int32)
    /// No descriptor for a socket or the lookup (EMFILE/ENFILE): the proxy's own, temporary failure.
    case outOfDescriptors(Int32)
}
