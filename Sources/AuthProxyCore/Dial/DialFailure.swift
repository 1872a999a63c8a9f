/// Why one attempt of the ``Connector`` could not connect, in the proxy's own terms (the ``Dialer``'s failures, and
/// the connector's own deadline). ``UpstreamError/init(dial:host:port:destination:timeoutSeconds:)`` maps it to the
/// answer, for HTTP exchanges and tunnels alike.
enum DialFailure: Error, Equatable {
    /// Every resolved address is in `deny_destinations`; the first one.
    case denied(IPAddress)
    /// The name did not resolve (the resolver's message).
    case unresolved(String)
    /// No address accepted a connection (the last errno).
    case unreachable(Int32)
    /// No descriptor for a socket or the lookup (EMFILE/ENFILE): the proxy's own, temporary failure.
    case outOfDescriptors(Int32)
    /// The attempt did not connect within its time (the connector's deadline, seconds).
    case timedOut(Int)
}
