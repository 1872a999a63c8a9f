import Synchronization

/// The Digest sessions of the process, so that the next request to a host answers its last challenge at once
/// (preemptively) instead of taking a 401 first: per (credential, destination) the challenge (realm, nonce,
/// opaque, algorithm, qop) and the next `nc`. At most ``capacity`` sessions; the least recently used goes first.
/// A destination with several realms keeps the last one answered (a request to another realm takes its 401).
///
/// One for all event loops (``DigestSessions``): a server's nonce is the same whichever loop a request runs on, and
/// `nc` must grow across all of its uses (a server that checks it refuses a count it has seen).
struct DigestSessionCache {
    struct Key: Hashable {
        /// The credential's name and user: a reload that changes the user starts a new session.
        var credential: String
        var user: String
        var host: String
        var port: Int
    }

    struct Session: Equatable {
        var challenge: DigestChallenge
        var qop: DigestQop
        /// The `nc` the next request sends.
        var nextNC: UInt32 = 1
        /// For the `-sess` algorithms the cnonce stays with the session (its first hash depends on it).
        var cnonce: String
    }

    let capacity: Int
    private var sessions: [Key: Session] = [:]
    /// Keys from the least to the most recently used.
    private var order: [Key] = []

    init(capacity: Int = 256) {
        self.capacity = max(1, capacity)
    }

    var count: Int { sessions.count }

    /// Takes the session's next use: the challenge, its qop, the `nc` to send and the cnonce (a fresh one for the
    /// non-session algorithms). nil when there is none.
    mutating func use(_ key: Key, newCnonce: () -> String) -> (Session, nc: UInt32, cnonce: String)? {
        guard var s = sessions[key] else { return nil }
        let nc = s.nextNC
        s.nextNC = nc == UInt32.max ? 1 : nc + 1
        sessions[key] = s
        touch(key)
        return (s, nc, s.challenge.algorithm.isSession ? s.cnonce : newCnonce())
    }

    /// A session from a challenge just answered; returns the `nc` the answer sends: 1 for a new nonce, the next
    /// count when the session already had this nonce (another request met the same challenge meanwhile).
    @discardableResult
    mutating func start(_ key: Key, challenge: DigestChallenge, qop: DigestQop, cnonce: String) -> UInt32 {
        var nc: UInt32 = 1
        if let s = sessions[key], s.challenge.nonce == challenge.nonce { nc = s.nextNC }
        sessions[key] = Session(challenge: challenge, qop: qop, nextNC: nc == UInt32.max ? 1 : nc + 1, cnonce: cnonce)
        touch(key)
        while sessions.count > capacity, !order.isEmpty {
            sessions[order.removeFirst()] = nil
        }
        return nc
    }

    /// The server refused the session's login: the next request starts without it.
    mutating func drop(_ key: Key) {
        guard sessions.removeValue(forKey: key) != nil else { return }
        order.removeAll { $0 == key }
    }

    private mutating func touch(_ key: Key) {
        if let i = order.lastIndex(of: key) { order.remove(at: i) }
        order.append(key)
    }
}

/// The process's ``DigestSessionCache``, shared by the event loops under a lock (held for a dictionary look-up; a
/// request with a Digest login takes it once for its head, and once more for a 401).
final class DigestSessions: Sendable {
    static let shared = DigestSessions()
    private let cache = Mutex(DigestSessionCache())

    func with<R: Sendable>(_ body: (inout DigestSessionCache) -> R) -> R {
        cache.withLock { body(&$0) }
    }
}
