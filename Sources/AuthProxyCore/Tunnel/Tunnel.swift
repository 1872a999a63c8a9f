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
/// is the one the handshake went over (plain, or TLS through libcurl for `wss://`), and the bytes either side sent
/// behind the handshake go first.
///
/// The interception of matched hosts (a later capability) replaces this relay with a TLS server; the
/// connection only talks to it through ``clientReadable()``, ``clientDrained()``, ``clientEOF()``,
/// ``checkTimeouts(now:)`` and ``close()``.
///
/// Confined to the connection's loop queue. It owns its upstream ``SocketChannel`` and closes it in every way it
/// ends (``close()``, a failure, a refused connect), so the channel never reports to a freed tunnel.
final class Tunnel: SocketChannelOwner {
    private unowned let connection: ClientConnection
    private let host: String
    private let port: Int
    private let timeoutSeconds: Int
    private let idleTimeoutSeconds: Int
    private var lastActivity: UInt64 = 0
    private var client: SocketChannel { connection.channel }
    private var upstream: SocketChannel?
    private var connectDeadline: UInt64 = 0
    private var connected = false
    private var closed = false
    private var clientDone = false
    private var upstreamDone = false
    private var bytesUp: Int64 = 0
    private var bytesDown: Int64 = 0
    /// Connecting the upstream (``start(_:)``); nil once connected or failed.
    private var connector: Connector?
    private let limit = ClientConnection.maxBuffered
    /// The CONNECT was answered 200 before the upstream was connected (a matched host whose first bytes turned out
    /// to be TLS): no second answer, and a failure to connect can only close.
    private let answered: Bool
    /// The relay carries a WebSocket (counted in the open-WebSockets gauge while it runs).
    let isWebSocket: Bool

    init(
        connection: ClientConnection, host: String, port: Int, timeoutSeconds: Int, idleTimeoutSeconds: Int,
        answered: Bool = false, isWebSocket: Bool = false
    ) {
        self.connection = connection
        self.host = host
        self.port = port
        self.timeoutSeconds = timeoutSeconds
        self.idleTimeoutSeconds = idleTimeoutSeconds
        self.answered = answered
        self.isWebSocket = isWebSocket
    }

    /// Relays over an upstream connection that is already open (a WebSocket after its `101`, handed over by the
    /// exchange): `toUpstream` holds bytes the client sent behind its handshake, `toClient` bytes the upstream sent
    /// behind its `101`.
    func adopt(_ channel: SocketChannel, toUpstream: ByteBuffer, toClient: ByteBuffer) {
        channel.owner = self
        upstream = channel
        connected = true
        lastActivity = DispatchTime.now().uptimeNanoseconds
        if isWebSocket { ProxyMetrics.active?.webSocketOpened() }
        if !toClient.isEmpty {
            toClient.withUnreadBytes { client.write($0) }
            bytesDown += Int64(toClient.count)
        }
        if !toUpstream.isEmpty {
            toUpstream.withUnreadBytes { channel.write($0) }
            bytesUp += Int64(toUpstream.count)
        }
        channel.resumeReading()
        client.resumeReading()
    }

    private var destination: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// Connects along `route`, planned with the CONNECT
    /// (``RequestPlanner/tunnelRoute(host:port:routing:denyDestinations:)``), through the ``Connector``: the
    /// destination or the parents, `deny_destinations`, and the answer to a failure are its, as for the own client's
    /// connections. (The client's reading stays paused meanwhile; the connect timeout runs from here.)
    func start(_ route: TunnelRoute) {
        connectDeadline = DispatchTime.now().uptimeNanoseconds + UInt64(timeoutSeconds) * 1_000_000_000
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
    func channelWriteFailed(_ channel: SocketChannel, error: Int32) { close(notify: true) }

    private func established() {
        guard let up = upstream else { return }
        connected = true
        lastActivity = DispatchTime.now().uptimeNanoseconds
        let early = connection.tunnelEstablished(answered: answered)
        // Reading before the first write: a write that has to wait makes the write source, and a read source
        // registered after it can miss the upstream's reset (``SocketChannel/awaitConnect()``).
        up.resumeReading()
        if !early.isEmpty {
            early.withUnreadBytes { up.write($0) }
            bytesUp += Int64(early.count)
        }
        client.resumeReading()
    }

    private func fail(_ e: ErrorResponse) {
        guard !closed else { return }
        closed = true
        connector?.cancel()
        connector = nil
        upstream?.close()
        upstream = nil
        connection.tunnelFailed(e, answered: answered)
    }

    /// Relays from `from` to `to` until `to` has `limit` bytes pending; returns true at EOF.
    private func relay(from: SocketChannel, to: SocketChannel, count: inout Int64) -> (eof: Bool, error: Bool) {
        let scratch = connection.loop.scratch
        while to.pendingCount < limit {
            switch from.read(into: scratch) {
            case .bytes(let n):
                to.write(UnsafeRawBufferPointer(rebasing: scratch[0..<n]))
                count += Int64(n)
                lastActivity = DispatchTime.now().uptimeNanoseconds
                if to.failed { return (false, true) }
            case .wouldBlock: return (false, false)
            case .eof: return (true, false)
            case .error: return (false, true)
            }
        }
        from.pauseReading()
        return (false, false)
    }

    func clientReadable() {
        guard connected, let up = upstream, !clientDone else { return }
        let r = relay(from: client, to: up, count: &bytesUp)
        if r.error { close(notify: true); return }
        if r.eof { clientEOF() }
    }

    private func upstreamReadable() {
        guard let up = upstream, !upstreamDone else { return }
        let r = relay(from: up, to: client, count: &bytesDown)
        if r.error { close(notify: true); return }
        if r.eof {
            upstreamDone = true
            up.pauseReading()
            client.shutdownWriteWhenFlushed()
            finishIfDone()
        }
    }

    /// The client sent EOF (or its connection failed before the tunnel was up).
    func clientEOF() {
        guard connected, let up = upstream else {
            close(notify: true)
            return
        }
        clientDone = true
        client.pauseReading()
        up.shutdownWriteWhenFlushed()
        finishIfDone()
    }

    /// The client took its pending bytes: read the upstream again. The bytes already waiting are relayed now
    /// (until EAGAIN) rather than on the next read event, so a wake-up lost across the read source's
    /// suspend/resume cannot stall the tunnel with data sitting in the kernel.
    func clientDrained() {
        if !upstreamDone, let up = upstream, !up.isReading {
            up.resumeReading()
            upstreamReadable()
        }
        finishIfDone()
    }

    private func upstreamDrained() {
        if !clientDone, connected, !client.isReading {
            client.resumeReading()
            clientReadable()
        }
        finishIfDone()
    }

    private func finishIfDone() {
        guard clientDone, upstreamDone, client.pendingCount == 0, (upstream?.pendingCount ?? 0) == 0 else { return }
        close(notify: true)
    }

    func checkTimeouts(now: UInt64) {
        // Back-pressure that has eased but left a direction paused (no drain event came): resume it.
        if connected, !closed, let up = upstream {
            if !upstreamDone, !up.isReading, client.pendingCount < limit { clientDrained() }
            if !closed, !clientDone, !client.isReading, up.pendingCount < limit { upstreamDrained() }
        }
        if !connected, !closed, now > connectDeadline {
            fail(
                ErrorResponse(
                    status: 504,
                    message: "Upstream \(destination) did not accept a connection within \(timeoutSeconds) s"))
        }
        // A tunnel where nothing moved either way (or a half-closed one whose other side never finishes).
        if connected, !closed,
            now - max(lastActivity, client.lastSendProgress, upstream?.lastSendProgress ?? 0)
                > UInt64(idleTimeoutSeconds) * 1_000_000_000
        {
            close(notify: true)
        }
    }

    func close() { close(notify: false) }

    /// Ends the tunnel now and lets the connection log it (the end of the shutdown grace period).
    func finish() { close(notify: true) }

    private func close(notify: Bool) {
        guard !closed else { return }
        closed = true
        if isWebSocket { ProxyMetrics.active?.webSocketClosed() }
        connector?.cancel()
        connector = nil
        upstream?.close()
        upstream = nil
        if notify { connection.tunnelFinished(bytesUp: bytesUp, bytesDown: bytesDown) }
    }
}
