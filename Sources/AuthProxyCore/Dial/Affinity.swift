/// Who may take a pooled upstream connection: any exchange, or only those of one client connection that
/// authenticated it itself (NTLM/Negotiate sent by the client, ``OwnUpstreams``), whose login lives on the
/// connection and must never serve another client.
enum Affinity: Hashable {
    case shared
    /// The ``OwnUpstreams/owner`` number of that client connection (never reused within the process).
    case ownedBy(UInt64)

    var isOwned: Bool {
        if case .ownedBy = self { return true }
        return false
    }
}
