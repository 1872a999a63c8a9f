import CAuthProxyShims
import CCurl
import Dispatch
import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// CONNECT: a tunnel served by the proxy for matched hosts (TLS intercepted, or plain HTTP), a blind ``Tunnel``
/// otherwise; and the relay of a WebSocket after its `101`.
extension ClientConnection {
    func startTunnel(host: String, port: Int) {
        switch RequestPlanner.connect(
            host: host, port: port, store: credentials, connectPorts: context.config.connectPorts,
            unmatched: context.config.unmatched, noIntercept: context.config.tls.noIntercept,
            routing: context.routing, denyDestinations: context.access.denyDestinations)
        {
        case .refuse(let e, let reason):
            ProxyMetrics.active?.denied(reason)
            respond(e, close: true)
            return
        case .serve(let blindAllowed):
            startServedTunnel(host: host, port: port, blindAllowed: blindAllowed)
            return
        case .blind(let route):
            machine.tunnelStarted()
            channel.pauseReading()
            let t = Tunnel(
                connection: self, client: channel, host: host, port: port,
                timeoutSeconds: context.config.upstreamTimeoutSeconds,
                idleTimeoutSeconds: context.config.tunnelIdleTimeoutSeconds)
            tunnel = t
            t.start(route)
        }
    }

    /// CONNECT to a matched host: answer 200 at once and let the first bytes inside decide what the tunnel is
    /// (``firstTunnelBytes(_:)``). Meanwhile the header timeout applies, and the CONNECT's context stays attached
    /// for its access-log line.
    func startServedTunnel(host: String, port: Int, blindAllowed: Bool) {
        let started = machine.current?.started ?? now
        _ = machine.answerLocally(status: 200, close: false)
        channel.write("HTTP/1.1 200 Connection Established\r\nVia: \(context.viaValue)\r\n\r\n")
        interception = Interception(
            session: nil, server: context.tlsServer, host: host, port: port,
            blindAllowed: blindAllowed, connectStarted: started)
        machine.servedTunnelStarted(now: now)
    }

    /// The first bytes inside a served tunnel (in `inbuf`) arrived. Returns true when requests may be parsed now
    /// (plain HTTP inside); false when more bytes are needed or the tunnel became something else.
    func firstTunnelBytes(_ ic: Interception) -> Bool {
        let content = inbuf.withUnreadBytes { TunnelContent.classify($0) }
        let decision = RequestPlanner.servedTunnel(
            content, host: ic.host, port: ic.port, canIntercept: ic.server != nil,
            blindAllowed: ic.blindAllowed, routing: context.routing, denyDestinations: context.access.denyDestinations)
        let destination = "\(ic.host):\(ic.port)"
        switch decision {
        case .wait:
            return false
        case .serveHTTP:
            logAccess(status: 200, started: ic.connectStarted)
            detachExchange()
            machine.tunnelCarriesHTTP(now: now)
            return true
        case .intercept:
            if let server = ic.server { startInterception(ic, server: server) }
            return false
        case .blind(let route):
            if context.notices.first(destination) {
                logger.warning(
                    "CONNECT to a matched host relayed blindly: credentials cannot be applied without [tls] interception",
                    metadata: [
                        "host": "\(destination)",
                        "hint": "run `authproxy ca init` and configure [tls], or use upgrade_to_https",
                    ])
            }
            interception = nil
            machine.tunnelAfterFirstBytes(started: ic.connectStarted)
            channel.pauseReading()
            let t = Tunnel(
                connection: self, client: channel, host: ic.host, port: ic.port,
                timeoutSeconds: context.config.upstreamTimeoutSeconds,
                idleTimeoutSeconds: context.config.tunnelIdleTimeoutSeconds, answered: true)
            tunnel = t
            t.start(route)
            return false
        case .refuse(let e):
            if e.status == 403 {
                logger.warning(
                    "TLS inside a CONNECT to a matched host on a port outside connect_ports, without [tls] interception: refused",
                    metadata: [
                        "client": "\(peer)", "host": "\(destination)",
                        "hint": "configure [tls] to intercept it, or add the port to [proxy] connect_ports",
                    ])
            }
            refuseTunnelContent(ic, e)
            return false
        }
    }

    /// Answers the CONNECT's tunnel with an error and closes (its access-log line says so).
    private func refuseTunnelContent(_ ic: Interception, _ e: ErrorResponse) {
        interception = nil
        inbuf.removeAll()
        machine.tunnelContentRefused(started: ic.connectStarted)
        respond(e, close: true)
    }

    /// The upstream socket is connected: answer 200 (unless the CONNECT was answered already) and hand the bytes the
    /// client already sent to it.
    func tunnelEstablished(answered: Bool) -> ByteBuffer {
        if !answered { channel.write("HTTP/1.1 200 Connection Established\r\nVia: \(context.viaValue)\r\n\r\n") }
        let early = inbuf
        inbuf.removeAll()
        return early
    }

    func tunnelFailed(_ e: ErrorResponse, answered: Bool) {
        if e.status == 403 { ProxyMetrics.active?.denied(.destination) }
        tunnel = nil
        switch machine.tunnelFailed(answered: answered) {
        case .answer:
            respond(e, close: true)
        case .cut:
            logger.warning("tunnel could not be opened", metadata: ["client": "\(peer)", "cause": "\(e.message)"])
            logAccess(status: e.status)
            close()
        }
    }

    func tunnelFinished(bytesUp: Int64, bytesDown: Int64, webSocket: Bool) {
        if let x = ex {
            x.bodyBytesIn = bytesUp
            x.bodyBytesOut = bytesDown
        }
        logAccess(webSocket: webSocket)
        detachExchange()
        tunnel = nil
        close()
    }
}

/// WebSocket: the `101` answer to a handshake turns the connection into a relay.
extension ClientConnection {
    func transferSwitchedProtocols(channel up: SocketChannel, leftover: ByteBuffer) {
        guard let x = ex, let url = x.upstreamURL, !machine.isClosed else {
            up.close()
            return
        }
        x.transfer = nil
        if let violation = x.responseHead.violation {
            up.close()
            refuseResponseHead(violation)
            return
        }
        if let refusal = WebSocketSwitch.check(
            requestKeys: x.head?.headers.values("sec-websocket-key") ?? [],
            upgrade: x.responseHead.values(of: "upgrade"), accept: x.responseHead.values(of: "sec-websocket-accept"))
        {
            // Never a raw relay to anything but the WebSocket this handshake asked for.
            up.close()
            refuseSwitch(refusal, destination: "\(url.urlHost):\(url.port)")
            return
        }
        guard machine.upgraded() else {
            up.close()
            return
        }
        for secret in responseSecrets(x) { maskInjectedToken(in: x, token: secret) }
        x.heldHead.removeAll()
        x.responseHead.writeSwitchingProtocols(
            into: &x.heldHead, upgrade: x.head?.upgrade ?? "websocket", via: context.viaValue)
        // Through the client's TLS when the handshake came inside an intercepted tunnel.
        x.heldHead.withUnreadBytes { send($0) }
        x.heldHead.removeAll()
        tokenAccepted()
        ProxyMetrics.active?.webSocketUpgrade(
            credential: appliedCredential(x) ?? MetricLabels.noCredential, result: "upgraded")
        // Frames the client sent right behind its handshake go first.
        let early = inbuf
        inbuf.removeAll()
        // Inside an intercepted tunnel the frames are relayed through the client's TLS session (frames it holds
        // already decrypted or still encrypted are read first).
        let client: any TunnelEndpoint =
            tls.map { InterceptedClientEndpoint(channel: channel, session: $0, out: loop.tlsOut) } ?? channel
        let t = Tunnel(
            connection: self, client: client, host: url.host, port: url.port,
            timeoutSeconds: context.config.upstreamTimeoutSeconds,
            idleTimeoutSeconds: context.config.tunnelIdleTimeoutSeconds, isWebSocket: true)
        tunnel = t
        t.adopt(up, toUpstream: early, toClient: leftover)
    }

    private func refuseSwitch(_ refusal: WebSocketSwitch.Refusal, destination: String) {
        logger.warning(
            "upstream switch refused",
            metadata: ["client": "\(peer)", "destination": "\(destination)", "cause": "\(refusal)"])
        ProxyMetrics.active?.upstreamError(.protocolError)
        run(
            machine.switchRefused(),
            answer: ErrorResponse(
                status: 502,
                message:
                    "Upstream \(destination) answered the WebSocket handshake with a 101 that cannot be relayed: \(refusal)",
                details: ["The connection to it was closed; nothing was relayed (RFC 6455 §4.1)."]))
    }
}
