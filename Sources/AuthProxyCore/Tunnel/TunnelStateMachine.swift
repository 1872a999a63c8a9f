/// Every lifecycle decision of a ``Tunnel`` (a blind CONNECT tunnel, or a WebSocket relayed after its `101`), without
/// I/O: when it is up, which side reads, when a direction is held back by the other side's send queue, when an EOF
/// is passed on as a half-close, when it is done, and its connect and idle deadlines. Times are passed in (uptime
/// ns); the answers are ``Action``s the tunnel carries out on its two ``TunnelEndpoint``s.
///
/// A direction is named by the side it reads from: `.client` is client → upstream, `.upstream` upstream → client.
/// Each direction flows, is held (its destination has ``limit`` bytes queued: its source's reading is paused until
/// that queue drains), or has ended (its source sent EOF, passed on as a half-close once the queue is written).
/// The tunnel is open while both directions run, half-closed while one has ended, draining when both have ended and
/// a send queue is not written yet, and closed after that, after a failure, or when it was idle too long.
struct TunnelStateMachine: Equatable {
    enum Side: Equatable {
        case client, upstream

        var other: Side { self == .client ? .upstream : .client }
    }

    enum Flow: Equatable {
        case flowing
        /// The destination's send queue reached ``TunnelStateMachine/limit``: the source is not read until it drains.
        case held
    }

    enum State: Equatable {
        /// The upstream is being connected; past `deadline` the tunnel fails.
        case connecting(deadline: UInt64)
        case open(client: Flow, upstream: Flow)
        /// One direction has ended (`ended` sent EOF); the other still runs.
        case halfClosed(ended: Side, other: Flow)
        /// Both directions have ended; the last queued bytes are being written.
        case draining
        case closed
    }

    enum Action: Equatable {
        case pauseReading(Side)
        /// Read the side again, and relay what it has now (a wake-up lost across a paused read source, or bytes a
        /// TLS layer decrypted already, never wait for a read event that may not come).
        case resumeReading(Side)
        /// Half-close the side's sending once its queue is written (a TLS close_notify first, where there is TLS).
        case shutdownWrite(Side)
        /// Done (both directions ended and written, a failure, or idle): close both sides and log the tunnel.
        case close
        /// The upstream did not connect in time: the CONNECT fails (reported back with ``connectFailed()``).
        case connectTimedOut
    }

    /// What the relay does next when about to read from a side.
    enum ReadStep: Equatable {
        case read
        /// The destination's queue is full: pause reading the source (the direction is held now).
        case pause
        /// The direction does not run (not connected, ended, closed).
        case stop
    }

    /// Send-queue bytes at which a direction is held (``ClientConnection/maxBuffered``).
    let limit: Int
    let idleNanoseconds: UInt64
    private(set) var state: State
    /// When bytes last moved (a read relayed); a slow but steady reader counts through its send progress too.
    private var lastActivity: UInt64

    /// A tunnel whose upstream is being connected until `deadline`.
    init(limit: Int, idleTimeoutSeconds: Int, connectDeadline deadline: UInt64) {
        self.limit = limit
        idleNanoseconds = UInt64(max(idleTimeoutSeconds, 0)) * 1_000_000_000
        state = .connecting(deadline: deadline)
        lastActivity = 0
    }

    var isClosed: Bool { state == .closed }
    var isConnected: Bool {
        switch state {
        case .connecting, .closed: return false
        default: return true
        }
    }

    /// The upstream is connected (or was handed over already connected): both sides are read.
    mutating func connected(now: UInt64) -> [Action] {
        guard case .connecting = state else { return [] }
        state = .open(client: .flowing, upstream: .flowing)
        lastActivity = now
        return [.resumeReading(.upstream), .resumeReading(.client)]
    }

    private func flow(from side: Side) -> Flow? {
        switch state {
        case .open(let c, let u): return side == .client ? c : u
        case .halfClosed(let ended, let other): return ended == side ? nil : other
        case .connecting, .draining, .closed: return nil
        }
    }

    private mutating func setFlow(_ f: Flow, from side: Side) {
        switch state {
        case .open(let c, let u):
            state = side == .client ? .open(client: f, upstream: u) : .open(client: c, upstream: f)
        case .halfClosed(let ended, _) where ended != side:
            state = .halfClosed(ended: ended, other: f)
        default:
            return
        }
    }

    /// Whether to read `side` once more, its destination having `destinationPending` bytes queued.
    mutating func readStep(from side: Side, destinationPending: Int) -> ReadStep {
        guard flow(from: side) == .flowing else { return .stop }
        guard destinationPending < limit else {
            setFlow(.held, from: side)
            return .pause
        }
        return .read
    }

    /// Bytes were read and queued for the other side.
    mutating func relayed(now: UInt64) {
        lastActivity = max(lastActivity, now)
    }

    /// `side` sent EOF: stop reading it, pass the end on to the other side once its queue is written, and close
    /// when both directions are done and written.
    mutating func eof(from side: Side, clientPending: Int, upstreamPending: Int) -> [Action] {
        switch state {
        case .open(let c, let u):
            state = .halfClosed(ended: side, other: side == .client ? u : c)
        case .halfClosed(let ended, _) where ended != side:
            state = .draining
        case .connecting:
            // The client left before the upstream was connected: nothing to relay.
            state = .closed
            return [.close]
        default:
            return []
        }
        return [.pauseReading(side), .shutdownWrite(side.other)]
            + finishIfDone(clientPending: clientPending, upstreamPending: upstreamPending)
    }

    /// `side`'s send queue drained (below the channel's low-water mark, or empty): a direction held by it reads its
    /// source again, and a draining tunnel closes once both queues are empty.
    mutating func drained(_ side: Side, clientPending: Int, upstreamPending: Int) -> [Action] {
        var actions: [Action] = []
        let source = side.other
        let pending = side == .client ? clientPending : upstreamPending
        if flow(from: source) == .held, pending < limit {
            setFlow(.flowing, from: source)
            actions.append(.resumeReading(source))
        }
        return actions + finishIfDone(clientPending: clientPending, upstreamPending: upstreamPending)
    }

    private mutating func finishIfDone(clientPending: Int, upstreamPending: Int) -> [Action] {
        guard state == .draining, clientPending == 0, upstreamPending == 0 else { return [] }
        state = .closed
        return [.close]
    }

    /// The upstream could not be connected (refused, unreachable, denied, timed out): the tunnel ends without having
    /// relayed anything. Returns whether it was still connecting (so the failure is answered once).
    mutating func connectFailed() -> Bool {
        guard case .connecting = state else { return false }
        state = .closed
        return true
    }

    /// A read or write failed on either side: the tunnel ends at once.
    mutating func failed() -> [Action] {
        guard state != .closed else { return [] }
        state = .closed
        return [.close]
    }

    /// The tunnel is ended from outside (the connection closes, the shutdown grace period ends, a connect failed).
    /// Returns whether it was still running (so its end is carried out once).
    mutating func close() -> Bool {
        guard state != .closed else { return false }
        state = .closed
        return true
    }

    /// The once-a-second check: the connect deadline; directions held although their destination's queue has
    /// drained (no drain event came); and the idle timeout, counted from the last byte relayed or written to
    /// either side (a half-closed tunnel whose other side never finishes ends the same way).
    mutating func tick(
        now: UInt64, clientPending: Int, upstreamPending: Int, clientLastSend: UInt64, upstreamLastSend: UInt64
    ) -> [Action] {
        switch state {
        case .closed:
            return []
        case .connecting(let deadline):
            // The state stays until the tunnel reports the failure it answers (``connectFailed()``).
            return now > deadline ? [.connectTimedOut] : []
        default:
            break
        }
        let last = max(lastActivity, clientLastSend, upstreamLastSend)
        if now > last, now - last > idleNanoseconds {
            state = .closed
            return [.close]
        }
        var actions: [Action] = []
        if flow(from: .upstream) == .held, clientPending < limit {
            setFlow(.flowing, from: .upstream)
            actions.append(.resumeReading(.upstream))
        }
        if flow(from: .client) == .held, upstreamPending < limit {
            setFlow(.flowing, from: .client)
            actions.append(.resumeReading(.client))
        }
        return actions + finishIfDone(clientPending: clientPending, upstreamPending: upstreamPending)
    }
}
