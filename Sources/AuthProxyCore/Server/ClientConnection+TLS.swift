import CAuthProxyShims
import CCurl
import Dispatch
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// Intercepted CONNECT tunnels: TLS with the client over memory BIOs on the same socket sources.
extension ClientConnection {
    enum TLSPull { case ok, eof, closed }

    /// Advances the TLS handshake and decrypts buffered input into `inbuf` (up to its limit).
    func pullTLS() -> TLSPull {
        guard let tls else { return .ok }
        if !tls.handshakeDone {
            switch tls.handshake() {
            case .needMore:
                flushTLS()
                return .ok
            case .failed(let message, let untrusted):
                flushTLS()  // the alert
                if untrusted {
                    logger.warning("client did not trust the authproxy CA", metadata: ["client": "\(peer)",
                        "host": "\(tls.servedName ?? tls.fallbackHost)", "cause": "\(message)",
                        "hint": "make the client trust the CA in [tls] ca_cert"])
                } else {
                    logger.warning("TLS handshake with client failed", metadata: ["client": "\(peer)",
                        "host": "\(tls.servedName ?? tls.fallbackHost)", "cause": "\(message)"])
                }
                close()
                return .closed
            case .done:
                flushTLS()
                machine.handshakeFinished(now: now)
            }
        }
        while inbuf.count < Self.maxInput {
            switch tls.read(into: loop.scratch) {
            case .bytes(let n):
                inbuf.append(UnsafeRawBufferPointer(rebasing: loop.scratch[0..<n]))
            case .wantMore:
                flushTLS()
                return .ok
            case .closed:
                return .eof
            case .failed(let message):
                logger.warning("TLS error from client", metadata: ["client": "\(peer)", "cause": "\(message)"])
                close()
                return .closed
            }
        }
        return .ok
    }

    /// The client completed the handshake, then closed without sending a request. Clients that verify the
    /// certificate after the handshake (GnuTLS, as in Debian's GDAL and QGIS; Node) do that, without an alert,
    /// when they do not trust the authproxy CA; OpenSSL-based clients send an alert instead (see ``pullTLS()``).
    func closedAfterHandshake(_ tls: TLSSession) {
        logger.warning("client closed the intercepted connection after the TLS handshake without a request",
            metadata: ["client": "\(peer)", "host": "\(tls.servedName ?? tls.fallbackHost)",
                "hint": "the client may not trust the authproxy CA (GnuTLS and Node check it after the handshake and close without an alert): make it trust [tls] ca_cert"])
    }

    func flushTLS() {
        tls?.drain(through: loop.tlsOut) { channel.write($0) }
    }

    /// Writes to the client: through TLS when the connection is intercepted.
    func send(_ bytes: UnsafeRawBufferPointer) {
        guard let tls else {
            channel.write(bytes)
            return
        }
        guard !channel.isClosed, tls.write(bytes) else { return }
        flushTLS()
    }

    func send(_ string: String) {
        var s = string
        s.withUTF8 { send(UnsafeRawBufferPointer($0)) }
    }

    /// The first bytes inside a tunnel to a matched host are TLS and `[tls]` intercepts: the CONNECT's line is logged
    /// (its exchange ends here; the requests inside are exchanges of their own), then TLS with the client begins
    /// with a minted certificate, and the requests inside are handled like any other (credentials, retries,
    /// streaming).
    func startInterception(_ ic: Interception, server: TLSServer) {
        guard let session = TLSSession(server: server, host: ic.host) else {
            logger.warning("cannot start TLS for an intercepted tunnel", metadata: ["client": "\(peer)", "host": "\(ic.host):\(ic.port)"])
            logAccess(status: 500, started: ic.connectStarted)
            close()
            return
        }
        logAccess(status: 200, started: ic.connectStarted)
        detachExchange()
        ic.session = session
        // The ClientHello (and whatever followed it) is in the input buffer.
        inbuf.withUnreadBytes { session.feed($0) }
        inbuf.removeAll()
        _ = pullTLS()
    }
}
