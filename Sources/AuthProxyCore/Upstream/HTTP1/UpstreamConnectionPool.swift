import Dispatch

/// Idle upstream connections of the proxy's own HTTP/1.1 client, per event loop, by destination (host, port,
/// plain or TLS with its server-trust settings), route and affinity, with the read and send buffers that loop's
/// exchanges share.
///
/// The most recently used connection is taken first (the likeliest to be alive, and the others age out). At
/// most ``maxIdlePerDestination`` per destination and ``maxIdle`` in all are kept; one idle for
/// ``idleTimeout`` is closed by the loop's sweep, or when it is next looked at (the sweep stops while the loop has
/// no client connection, so that an idle proxy does not wake up).
///
/// Confined to `queue` (every method is called there).
final class UpstreamConnectionPool {
    struct Key: Hashable {
        var host: String
        var port: Int
        /// Whether only one client connection's exchanges may take it (``Affinity``).
        var affinity: Affinity = .shared
        /// How it reaches the destination (``Route``).
        var route: Route = .direct
        /// An https connection (made by libcurl, ``CurlConnector``).
        var tls = false
        /// The server-trust settings it was verified with: a connection verified more leniently (a pinned key,
        /// no verification) is never handed to a request that expects the default verification, or the reverse.
        var trust: ServerTrustSettings? = nil
        /// The client certificate presented in its handshake: a connection authenticated as one client identity is
        /// never handed to a request for another, or for none.
        var certificate: ClientCertificateSettings? = nil

        // Hashed by what tells destinations apart in practice; equality still compares every field. The
        // synthesized hash of all six showed in the relay's instruction count (a key is hashed per request).
        // Equality compares the cheap fields first and the settings (mostly both absent) without copying them.
        static func == (a: Key, b: Key) -> Bool {
            guard a.port == b.port, a.tls == b.tls, a.host == b.host, a.affinity == b.affinity, a.route == b.route
            else { return false }
            switch (a.trust, b.trust) {
            case (.none, .none): break
            case (.some(let x), .some(let y)) where x == y: break
            default: return false
            }
            switch (a.certificate, b.certificate) {
            case (.none, .none): return true
            case (.some(let x), .some(let y)): return x == y
            default: return false
            }
        }

        func hash(into h: inout Hasher) {
            h.combine(host)
            h.combine(port)
            if case .ownedBy(let owner) = affinity { h.combine(owner) }
        }
    }

    static let maxIdlePerDestination = 64
    /// Enough for a thousand destinations each kept alive on one loop: a pool smaller than the destinations a
    /// loop serves closes one connection and opens another on nearly every request (with 1,000 hosts and 256
    /// here, 1,745 connects per 2,000 requests and 1.8× the instructions per request; bench/irperrequest.sh
    /// --hosts). Idle plain connections cost a descriptor and a few hundred bytes; they close after
    /// ``idleTimeout``.
    static let maxIdle = 1024
    /// Idle connections one client connection keeps to one destination for itself.
    static let maxIdlePerOwnedDestination = 8
    static let idleTimeout: UInt64 = 60 * 1_000_000_000

    let queue: DispatchQueue
    /// The loop's multi handle, which makes the TLS connections (``CurlConnector``).
    let multi: CurlMulti
    /// Where every upstream read on this loop lands first.
    let readBuffer: UnsafeMutableRawBufferPointer
    /// Where request bodies are framed before they are written.
    let sendBuffer: UnsafeMutableRawBufferPointer
    /// Where request heads are written.
    var headBuffer = ByteBuffer()
    /// The Digest sessions (``DigestLogin``), shared by every loop: the next request to a host logs in without a 401
    /// first.
    let digestSessions = DigestSessions.shared
    private var idle: [Key: [UpstreamConnection]] = [:]
    private(set) var idleCount = 0
    /// Before this moment (uptime nanoseconds) no idle connection has been idle for ``idleTimeout``, so the sweep
    /// looks at nothing: a lower bound, as a connection taken or dropped meanwhile only makes the true moment
    /// later. Without it every loop looked at every destination each second, work that grows with the destinations
    /// kept and that finds nothing to do while they are in use.
    private var nextExpiry = UInt64.max

    init(queue: DispatchQueue, multi: CurlMulti) {
        self.queue = queue
        self.multi = multi
        readBuffer = .allocate(byteCount: 64 * 1024, alignment: 16)
        sendBuffer = .allocate(byteCount: 64 * 1024, alignment: 16)
    }

    deinit {
        readBuffer.deallocate()
        sendBuffer.deallocate()
    }

    /// An idle connection to `key`, if one is kept.
    func take(_ key: Key) -> UpstreamConnection? {
        assertOnQueue(queue)
        guard var list = idle[key] else { return nil }
        let now = DispatchTime.now().uptimeNanoseconds
        var found: UpstreamConnection? = nil
        while let c = list.popLast() {
            idleCount -= 1
            if now &- c.idleSince < Self.idleTimeout {
                found = c
                break
            }
            c.close()
        }
        idle[key] = list.isEmpty ? nil : list
        return found
    }

    /// Keeps `c` for the next exchange to its destination, or closes it when the pool is full.
    func put(_ c: UpstreamConnection, now: UInt64) {
        assertOnQueue(queue)
        c.user = nil
        var list = idle[c.key] ?? []
        // A client's own connections (``OwnUpstreams``) are bounded by its connection, which closes them, not by
        // the shared caps: closed because the pool is full of other clients' connections, the one an NTLM login
        // lives on was gone between the handshake's steps (a 401 for a client that logs in itself).
        let room =
            c.key.affinity.isOwned
            ? list.count < Self.maxIdlePerOwnedDestination
            : list.count < Self.maxIdlePerDestination && idleCount < Self.maxIdle
        guard room, c.channel.isReading else {
            c.close()
            return
        }
        c.idleSince = now
        list.append(c)
        idle[c.key] = list
        idleCount += 1
        nextExpiry = min(nextExpiry, now &+ Self.idleTimeout)
    }

    /// An idle connection was closed by its server or sent something unasked: it is dropped.
    func idleConnectionStirred(_ c: UpstreamConnection) {
        remove(c)
        c.close()
    }

    /// Closes connections idle for longer than ``idleTimeout``. Runs every second per loop, and scans the
    /// destinations only once one may have expired (``nextExpiry``); there, a destination whose oldest connection
    /// (the first: connections are appended as they go idle) is still young costs one comparison, no copy.
    func expire(now: UInt64) {
        assertOnQueue(queue)
        guard idleCount > 0, now >= nextExpiry else { return }
        var next = UInt64.max
        for (key, list) in idle {
            guard let oldest = list.first else { continue }
            if now &- oldest.idleSince < Self.idleTimeout {
                next = min(next, oldest.idleSince &+ Self.idleTimeout)
                continue
            }
            let keep = list.filter { now &- $0.idleSince < Self.idleTimeout }
            for c in list where now &- c.idleSince >= Self.idleTimeout { c.close() }
            idle[key] = keep.isEmpty ? nil : keep
            idleCount -= list.count - keep.count
            if let first = keep.first { next = min(next, first.idleSince &+ Self.idleTimeout) }
        }
        nextExpiry = next
    }

    /// Closes the idle connections kept for one client connection (it closed).
    func closeOwned(by owner: UInt64) {
        assertOnQueue(queue)
        guard idleCount > 0 else { return }
        for (key, list) in idle where key.affinity == .ownedBy(owner) {
            for c in list { c.close() }
            idle[key] = nil
            idleCount -= list.count
        }
    }

    /// Closes every idle connection (shutdown).
    func closeAll() {
        assertOnQueue(queue)
        for list in idle.values { for c in list { c.close() } }
        idle.removeAll()
        idleCount = 0
    }

    private func remove(_ c: UpstreamConnection) {
        guard var list = idle[c.key], let i = list.firstIndex(where: { $0 === c }) else { return }
        list.remove(at: i)
        idle[c.key] = list.isEmpty ? nil : list
        idleCount -= 1
    }
}
