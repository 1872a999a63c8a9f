/// Which admin connection makes room for a new one. Pure: the server passes what is open.
///
/// Refusing new connections at the cap let 32 slow connections (each sending a partial request head) starve
/// the readiness probes that keep the pod in service. Instead, a source address may hold at most
/// ``perAddress`` connections, and at either limit the *oldest connection still sending its request head*
/// is closed to admit the new one: a probe sends its whole request at once, so it is never the oldest still
/// reading, while a slow connection is evicted by the next arrival. Connections already being answered are
/// never evicted; when every open connection is being answered, the new one is refused.
struct AdminConnectionSlots {
    var total: Int
    var perAddress: Int

    struct Open {
        var id: Int32
        var peer: IPAddress
        /// Accept order (smaller: older).
        var sequence: UInt64
        /// Still reading its request (not yet answering).
        var reading: Bool
    }

    enum Decision: Equatable {
        case admit
        /// Close this connection, then admit.
        case admitEvicting(Int32)
        case refuse
    }

    func decide(peer: IPAddress, open: [Open]) -> Decision {
        let fromPeer = open.filter { $0.peer == peer }
        if fromPeer.count >= perAddress {
            // The source's own oldest: one address cannot push out anybody else's connections.
            return Self.oldestReading(fromPeer).map { .admitEvicting($0) } ?? .refuse
        }
        if open.count >= total {
            return Self.oldestReading(open).map { .admitEvicting($0) } ?? .refuse
        }
        return .admit
    }

    private static func oldestReading(_ list: [Open]) -> Int32? {
        list.filter(\.reading).min { $0.sequence < $1.sequence }?.id
    }
}
