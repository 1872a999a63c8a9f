/// What a tunnel to a matched host becomes once its first bytes are in, decided by
/// ``RequestPlanner/servedTunnel(_:host:port:canIntercept:blindAllowed:routing:denyDestinations:)``.
enum ServedTunnelDecision: Equatable {
    /// More bytes are needed to tell.
    case wait
    /// Plain HTTP: the requests inside are served as `http://host:port` requests.
    case serveHTTP
    /// TLS, terminated with a minted certificate.
    case intercept
    /// TLS relayed blindly (no interception configured; the port is in `connect_ports`), along its route.
    case blind(TunnelRoute)
    /// Answered with this error and closed.
    case refuse(ErrorResponse)
}
