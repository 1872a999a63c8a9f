/// What a CONNECT becomes, decided by
/// ``RequestPlanner/connect(host:port:store:connectPorts:unmatched:noIntercept:routing:denyDestinations:)``.
enum ConnectDecision: Equatable {
    /// Refused (answered, then the connection closes: bytes meant for the tunnel must never be read as requests).
    case refuse(ErrorResponse, denied: MetricLabels.DeniedReason)
    /// A host:port a credential matches: the proxy answers 200 and serves what the first bytes inside turn out to
    /// be (TLS intercepted, plain HTTP). `blindAllowed`: the port is in `connect_ports`, so TLS that cannot be
    /// intercepted may still be relayed blindly.
    case serve(blindAllowed: Bool)
    /// A blind byte relay, on a port `connect_ports` allows: to an unmatched host, or to a matched one kept out of
    /// interception (`intercept = false`, `[tls] no_intercept`), along its route.
    case blind(TunnelRoute)
}
