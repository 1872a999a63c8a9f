import CAuthProxyShims
import Dispatch

#if canImport(Glibc)
    import Glibc
#endif

/// A blind CONNECT tunnel: resolves and connects to `host:port`, then relays bytes both ways with bounded
/// buffers (a side that cannot keep up pauses reading from the other) and half-close (EOF from one side is
/// passed on as `shutdown(SHUT_WR)` to the other; the tunnel ends when both directions are done).
///
/// The same relay carries a WebSocket after its `101` (``adopt(_:toUpstream:toClient:)``): the upstream connection
/// is the one the handshake went over (plain, or TLS for `wss://`), and the bytes either side sent behind the
/// handshake go first. The client's side is a ``TunnelEndpoint``: the connection's channel, or, for a WebSocket
/// inside an intercepted tunnel, the connection's TLS session above it (``InterceptedClientEndpoint``).
///
/// Every decision (when to read, hold, half-close, end; the connect and idle deadlines) is its
/// ``TunnelStateMachine``'s; the tunnel carries out the machine's actions. The connection only talks to it through
/// ``clientReadable()``, ``clientDrained()``, ``clientEOF()``, ``clientGone()``, ``checkTimeouts(now:)``,
/// ``finish()`` and ``close()``.
///
/// Confined to the connection's loop queue. It owns its upstream ``SocketChannel`` and closes it in every way it
/// ends (``close()``, a failure, a refused connect), so the channel never reports to a freed tunnel.
final class Tunnel: SocketChannelOwner {
    private unowned let connection: ClientConnection
    private let host: String
    private let port: Int
    private let timeoutSeconds: Int
    private var machine: TunnelStateMachine
    private let client: any TunnelEndpoint
    private var upstream: SocketChannel?
    private var bytesUp: Int64 = 0
    private var bytesDown: Int64 = 0
    /// Connecting the upstream (``start(_:)``); nil once connected or failed.
    private var connector: Connector?
    /// The CONNECT was answered 200 before the upstream was connected (a matched host whose first bytes turned out
    /// to be TLS): no second answer, and a failure to connect can only close.
    private let answered: Bool
    /// The relay carries a WebSocket (counted in the open-WebSockets gauge while it runs).
    private let isWebSocket: Bool

    /// `client`: the client's side (the connection's channel unless the relay runs inside its intercepted TLS).
    init(
        connection: ClientConnection, client: any TunnelEndpoint, host: String, port: Int, timeoutSeconds: Int,
        idleTimeoutSeconds: Int, answered: Bool = false, isWebSocket: Bool = false
    ) {
        self.connection = connection
        self.client = client
        self.host = host
        self.port = port
        self.timeoutSeconds = timeoutSeconds
        self.answered = answered
        self.isWebSocket = isWebSocket
        let now = DispatchTime.now().uptimeNanoseconds
        machine = TunnelStateMachine(
            limit: ClientConnection.maxBuffered, idleTimeoutSeconds: idleTimeoutSeconds,
            connectDeadline: now + UInt64(max(timeoutSeconds, 0)) * 1_000_000_000)
    }

    private func endpoint(_ side: TunnelStateMachine.Side) -> (any TunnelEndpoint)? {
        side == .client ? client : upstream
    }

    /// Relays over an upstream connection that is already open (a WebSocket after its `101`, handed over by the
    /// exchange): `toUpstream` holds bytes the client sent behind its handshake, `toClient` bytes the upstream sent
    /// behind its `101`.
    func adopt(_ channel: SocketChannel, toUpstream: ByteBuffer, toClient: ByteBuffer) {
        channel.owner = self
        upstream = channel
        if isWebSocket { ProxyMetrics.active?.webSocketOpened() }
        if !toClient.isEmpty {
            toClient.withUnreadBytes { client.write($0) }
            bytesDown += Int64(toClient.count)
        }
        if !toUpstream.isEmpty {
            toUpstream.withUnreadBytes { channel.write($0) }
            bytesUp += Int64(toUpstream.count)
        }
        run(machine.connected(now: DispatchTime.now().uptimeNanoseconds))
    }

    private var destination: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// Connects along `route`, planned with the CONNECT
    /// (``RequestPlanner/tunnelRoute(host:port:routing:denyDestinations:)``), through the ``Connector``: the
    /// destination or the parents, `deny_destinations`, and the answer to a failure are its, as for the own client's
    /// connections. (The client's reading stays paused meanwhile; the connect timeout runs from here.)
    func start(_ route: TunnelRoute) {
        let loop = connection.loop
        let c = Connector(
            multi: loop.multi, urlHost: host.contains(":") ? "[\(host)]" : host, port: port, tls: false, trust: nil,
            timeoutSeconds: timeoutSeconds, denyDestinations: connection.context.access.denyDestinations,
            keepAlive: false)
        connector = c
        c.start(route) { [unowned self] result in
            connector = nil
            switch result {
            case .success(let link):
                link.channel.owner = self
                upstream = link.channel
                established()
            case .failure(let e):
                if let n = e.outOfDescriptors {
                    // The proxy's own (temporary) failure: reported, and answered 503.
                    let context = connection.context
                    context.descriptors.report(
                        .tunnel, error: n, logger: context.logger, now: DispatchTime.now().uptimeNanoseconds)
                }
                fail(e.response)
            }
        }
    }

    // The upstream socket is connected by the ``Connector`` before the tunnel owns it.
    func channelConnected(_ channel: SocketChannel, error: Int32) {}

    // The upstream socket's events (the client's come through the connection).
    func channelReadable(_ channel: SocketChannel) { upstreamReadable() }
    func channelDrained(_ channel: SocketChannel) { upstreamDrained() }
    func channelWriteFailed(_ channel: SocketChannel, error: Int32) { run(machine.failed()) }

    private func established() {
        guard let up = upstream else { return }
        let early = connection.tunnelEstablished(answered: answered)
        // Reading before the first write: a write that has to wait makes the write source, and a read source
        // registered after it can miss the upstream's reset (``SocketChannel/awaitConnect()``). The client's
        // early bytes go before anything read from it now.
        up.resumeReading()
        if !early.isEmpty {
            early.withUnreadBytes { up.write($0) }
            bytesUp += Int64(early.count)
        }
        run(machine.connected(now: DispatchTime.now().uptimeNanoseconds))
    }

    private func fail(_ e: ErrorResponse) {
        guard machine.connectFailed() else { return }
        connector?.cancel()
        connector = nil
        upstream?.close()
        upstream = nil
        connection.tunnelFailed(e, answered: answered)
    }

    /// Carries out the machine's actions, in order; stops once the tunnel is closed.
    private func run(_ actions: [TunnelStateMachine.Action]) {
        for action in actions {
            switch action {
            case .pauseReading(let side):
                endpoint(side)?.pauseReading()
            case .resumeReading(let side):
                // Relayed now, not on the next read event: bytes a TLS layer already decrypted, or a wake-up lost
                // across the read source's suspend, would not make one.
                endpoint(side)?.resumeReading()
                relay(from: side)
            case .shutdownWrite(let side):
                endpoint(side)?.shutdownWriteWhenFlushed()
            case .close:
                end()
                return
            case .connectTimedOut:
                fail(
                    ErrorResponse(
                        status: 504,
                        message: "Upstream \(destination) did not accept a connection within \(timeoutSeconds) s"))
                return
            }
        }
    }

    /// Relays from `side` to the other side while the machine says to read.
    private func relay(from side: TunnelStateMachine.Side) {
        guard let from = endpoint(side), let to = endpoint(side.other) else { return }
        let scratch = connection.loop.scratch
        while true {
            switch machine.readStep(from: side, destinationPending: to.pendingCount) {
            case .read: break
            case .pause:
                from.pauseReading()
                return
            case .stop: return
            }
            switch from.read(into: scratch) {
            case .bytes(let n):
                to.write(UnsafeRawBufferPointer(rebasing: scratch[0..<n]))
                if side == .client { bytesUp += Int64(n) } else { bytesDown += Int64(n) }
                machine.relayed(now: DispatchTime.now().uptimeNanoseconds)
                if to.failed {
                    run(machine.failed())
                    return
                }
            case .wouldBlock:
                return
            case .eof:
                run(machine.eof(from: side, clientPending: client.pendingCount, upstreamPending: upstreamPending))
                return
            case .error:
                run(machine.failed())
                return
            }
        }
    }

    private var upstreamPending: Int { upstream?.pendingCount ?? 0 }

    func clientReadable() { relay(from: .client) }

    private func upstreamReadable() { relay(from: .upstream) }

    /// The client sent EOF (or its connection failed before the tunnel was up).
    func clientEOF() {
        run(machine.eof(from: .client, clientPending: client.pendingCount, upstreamPending: upstreamPending))
    }

    /// The client's connection failed (reset): nothing more can be relayed to it.
    func clientGone() { run(machine.failed()) }

    /// The client took its pending bytes.
    func clientDrained() {
        run(machine.drained(.client, clientPending: client.pendingCount, upstreamPending: upstreamPending))
    }

    private func upstreamDrained() {
        run(machine.drained(.upstream, clientPending: client.pendingCount, upstreamPending: upstreamPending))
    }

    func checkTimeouts(now: UInt64) {
        run(
            machine.tick(
                now: now, clientPending: client.pendingCount, upstreamPending: upstreamPending,
                clientLastSend: client.lastSendProgress, upstreamLastSend: upstream?.lastSendProgress ?? 0))
    }

    /// Ends the tunnel without reporting it (the connection is closing).
    func close() {
        guard machine.close() else { return }
        release()
    }

    /// Ends the tunnel now and lets the connection log it (the end of the shutdown grace period).
    func finish() {
        guard machine.close() else { return }
        end()
    }

    /// The machine closed the tunnel: release it and let the connection log it and close.
    private func end() {
        release()
        connection.tunnelFinished(bytesUp: bytesUp, bytesDown: bytesDown, webSocket: isWebSocket)
    }

    private func release() {
        if isWebSocket { ProxyMetrics.active?.webSocketClosed() }
        connector?.cancel()
        connector = nil
        upstream?.close()
        upstream = nil
    }
}
