import CAuthProxyShims
import CCurl
import Dispatch
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// CONNECT: interception for matched hosts, a blind ``Tunnel`` otherwise.
extension ClientConnection {
    func startTunnel(host: String, port: Int) {
        guard context.config.connectPorts.contains(port) else {
            ProxyMetrics.active?.denied(.connectPort)
            respond(ErrorResponse(status: 403, message: "CONNECT to \(host):\(port) is not allowed",
                details: ["Port \(port) is not in [proxy] connect_ports (\(context.config.connectPorts.sorted().map(String.init).joined(separator: ", ")))."]),
                close: true)  // after any refused CONNECT: bytes meant for the tunnel must never be read as requests
            return
        }
        let matched = credentials.matchesHost(host, port: port)
        if context.config.unmatched == .deny, !matched {
            ProxyMetrics.active?.denied(.unmatched)
            respond(ErrorResponse(status: 403, message: "Destination \(host):\(port) is not allowed",
                details: ["No credential matches it and [proxy] unmatched = \"deny\"."]), close: true)
            return
        }
        if matched {
            if let server = context.tlsServer {
                startInterception(server: server, host: host, port: port)
                return
            }
            if context.notices.first("\(host):\(port)") {
                logger.warning("CONNECT to a matched host relayed blindly: credentials cannot be applied without [tls] interception",
                    metadata: ["host": "\(host):\(port)", "hint": "run `authproxy ca init` and configure [tls], or use upgrade_to_https"])
            }
        }
        machine.tunnelStarted()
        channel.pauseReading()
        let t = Tunnel(connection: self, host: host, port: port, timeoutSeconds: context.config.upstreamTimeoutSeconds,
            idleTimeoutSeconds: context.config.tunnelIdleTimeoutSeconds)
        tunnel = t
        t.start()
    }

    /// The upstream socket is connected: answer 200 and hand the bytes the client already sent to it.
    func tunnelEstablished() -> ByteBuffer {
        channel.write("HTTP/1.1 200 Connection Established\r\nVia: \(context.viaValue)\r\n\r\n")
        let early = inbuf
        inbuf.removeAll()
        return early
    }

    func tunnelFailed(_ e: ErrorResponse) {
        if e.status == 403 { ProxyMetrics.active?.denied(.destination) }
        tunnel = nil
        machine.tunnelFailed()
        respond(e, close: true)
    }

    func tunnelFinished(bytesUp: Int64, bytesDown: Int64) {
        if let x = ex {
            x.bodyBytesIn = bytesUp
            x.bodyBytesOut = bytesDown
        }
        logAccess()
        detachExchange()
        tunnel = nil
        close()
    }
}
