/// The attempts one upstream connection makes, in order, and what each failure leads to: the parents of its route
/// (in the order ``ParentHealth`` gave when it started), then the destination itself where the route allows it (a
/// PAC file's trailing `DIRECT`), or the destination alone without a route. Pure: the ``Connector`` (the own client's
/// connections and tunnels) and ``CurlTransfer`` (libcurl's whole transfers) carry it out, and record each parent's
/// outcome in ``ParentHealth``.
///
/// A parent that failed moves the connection on by ``ParentFailoverStep`` (the parent at fault, nothing of the answer
/// with the client). A parent whose every address is in `deny_destinations` (only a PAC file's parents are checked:
/// ``ParentRoute/parentDeny``) is never contacted and is skipped the same way, without counting against its health;
/// when no parent is left, the answer names the last parent that was contacted and failed, or the denied one when
/// none was contacted, so a client learns of the policy only when nothing else went wrong.
struct ConnectAttempts: Equatable {
    /// Where one attempt connects.
    enum Target: Equatable {
        case direct
        case parent(ParentProxy)
    }

    /// How an attempt at a parent failed.
    enum Outcome: Equatable {
        /// Every address of the parent is in `deny_destinations` (the first one): nothing was sent to it.
        case denied(IPAddress)
        /// The parent was contacted and failed this way (its answer to CONNECT in `status`, 0 when none).
        case failed(ParentFailover.Cause, status: Int)
    }

    /// What follows a failed attempt.
    enum Step: Equatable {
        /// The connection tries this next.
        case attempt(Target)
        /// The connection fails with this.
        case fail(Failure)
    }

    /// Why a connection through parents failed, as the client is told (``UpstreamError/parent``,
    /// ``UpstreamError/deniedParent``).
    enum Failure: Equatable {
        case parent(ParentFailure)
        /// No parent was contacted: each was at a denied address; the last one and its address.
        case deniedParent(ParentProxy, IPAddress)
    }

    private let parents: [ParentProxy]
    private let fallbackDirect: Bool
    private let credential: String?
    private var index = 0
    private var wentDirect = false
    /// The last contacted parent's failure, for the answer when every parent failed.
    private var lastContacted: ParentFailure?

    /// `parents`: in the order they are to be tried (empty: direct). `credential`: `upstream_proxy_credential`, named
    /// in a refused login's answer.
    init(parents: [ParentProxy], fallbackDirect: Bool = false, credential: String? = nil) {
        self.parents = parents
        self.fallbackDirect = fallbackDirect
        self.credential = credential
    }

    /// The attempts along `route` (nil: direct), its parents ordered by their health now.
    init(route: ParentRoute?) {
        guard let route else {
            self.init(parents: [])
            return
        }
        self.init(
            parents: route.routing.health.order(route.candidates), fallbackDirect: route.fallbackDirect,
            credential: route.routing.credentialName)
    }

    /// The attempt under way.
    var current: Target {
        if wentDirect || parents.isEmpty { return .direct }
        return .parent(parents[index])
    }

    /// The parent under way (nil: direct).
    var parent: ParentProxy? {
        if case .parent(let p) = current { return p }
        return nil
    }

    /// The attempt at ``current`` (a parent) ended with `outcome`. `canMove` says whether the request can still go
    /// elsewhere (nothing of the answer reached the client, a body taken can be sent again); asked only when a
    /// move is possible, since making it possible may cost (rewinding a body).
    mutating func failed(_ outcome: Outcome, canMove: () -> Bool = { true }) -> Step {
        guard let p = parent else {
            preconditionFailure("a direct attempt's failure is the destination's, reported as it is")
        }
        let moves: Bool
        let failure: Failure
        switch outcome {
        case .denied(let ip):
            // Policy, not the parent's fault: skipped like one at fault, before anything was sent.
            moves = index + 1 < parents.count || fallbackDirect
            failure = lastContacted.map { .parent($0) } ?? .deniedParent(p, ip)
        case .failed(let cause, let status):
            let f = ParentFailure(parent: p, cause: cause, connectStatus: status, credential: credential)
            lastContacted = f
            failure = .parent(f)
            moves =
                ParentFailoverStep.after(
                    f, reachedClient: false, parentsLeft: parents.count - index - 1, fallbackDirect: fallbackDirect)
                != .giveUp(f)
        }
        guard moves, canMove() else { return .fail(failure) }
        if index + 1 < parents.count {
            index += 1
        } else {
            wentDirect = true
        }
        return .attempt(current)
    }
}
