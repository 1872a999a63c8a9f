/// Where a connection goes, as the ``Connector`` takes it: planned with a CONNECT
/// (``RequestPlanner/tunnelRoute(host:port:routing:denyDestinations:)``), or from a forwarded request's
/// ``ForwardPlan/parentRoute``.
enum TunnelRoute: Equatable {
    /// To the destination itself (`deny_destinations` checked on its resolved addresses).
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
