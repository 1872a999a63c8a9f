/// What an attempt that failed at its parent proxy leads to: the rule ``ConnectAttempts`` applies for every path
/// through a parent (the ``Connector``'s connections and libcurl's own transfers, ``CurlTransfer``).
///
/// The request moves on only when the parent is at fault (``ParentFailover/backsOff(_:)``: a refused CONNECT is
/// about the destination, and another parent would refuse it too) and nothing of the answer reached the client
/// (the client cannot be given a second answer). It moves to the next parent in the order, or after the last one
/// to the destination itself when the route allows it (a PAC file's trailing `DIRECT`). Otherwise the client is
/// told what the parent did (``ParentFailure``).
enum ParentFailoverStep: Equatable {
    /// The next parent in the order gets the request.
    case nextParent
    /// Every parent failed: the destination itself gets the request.
    case direct
    /// The request fails with this error.
    case giveUp(ParentFailure)

    /// `parentsLeft`: parents after the one that failed, in the order tried. `fallbackDirect`: the route lets the
    /// request go to the destination itself after its parents.
    static func after(
        _ failure: ParentFailure, reachedClient: Bool, parentsLeft: Int, fallbackDirect: Bool
    ) -> ParentFailoverStep {
        guard ParentFailover.backsOff(failure.cause), !reachedClient else { return .giveUp(failure) }
        if parentsLeft > 0 { return .nextParent }
        return fallbackDirect ? .direct : .giveUp(failure)
    }
}
