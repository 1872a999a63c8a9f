/// Where a blind tunnel's connection goes, planned with the CONNECT
/// (``RequestPlanner/tunnelRoute(host:port:routing:denyDestinations:)``) as ``ForwardPlan/parentRoute`` is for a
/// forwarded request, and carried out by ``Tunnel``.
enum TunnelRoute: Equatable {
    /// To the destination itself (``Dialer``: `deny_destinations` checked on its resolved addresses).
    case direct
    /// A CONNECT through the parents, in the order ``ParentHealth`` gives when the tunnel starts.
    case parents(ParentRoute)
    /// The PAC file has not been asked about this destination lately: the tunnel asks it off the loop, then the
    /// route is planned again.
    case pending(ParentRouting)
    /// No route can be given (no PAC file loaded, no answer from it, or a parent route to an address
    /// `deny_destinations` refuses): the tunnel fails with this answer.
    case refused(ErrorResponse)
}
