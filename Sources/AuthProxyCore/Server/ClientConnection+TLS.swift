import CAuthProxyShims
import CCurl
import Dispatch
import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// TLS with the client: the proxy's own TLS under the channel when the client's proxy URL is `https://`
/// (``ProxyTLSLink``), and intercepted CONNECT tunnels over memory BIOs on the same socket sources (inside the
/// proxy's own TLS, too, when both apply).
extension ClientConnection {
    /// The client's first bytes (`prefix`) are a TLS ClientHello: it speaks TLS to the proxy itself. The proxy's
    /// TLS goes under the channel and the connection carries on as a plain one above it. Without a certificate
    /// source the connection is closed (a TLS client could not read a plain-text error) and the log names the
    /// settings. Returns false when the connection was closed.
    func startProxyTLS(prefix: UnsafeRawBufferPointer) -> Bool {
        guard let server = context.proxyTLS else {
            if let held = context.access.throttle.admit("proxy-tls-off", now: now) {
                logger.warning(
                    "a client opened TLS to the proxy (an https:// proxy URL) but the proxy has no certificate for it: connection closed",
                    metadata: [
                        "client": "\(peer)",
                        "hint":
                            "set [proxy] tls_cert and tls_key, or configure [tls] (its CA mints one); or give the client an http:// proxy URL",
                        "held_back": "\(held)",
                    ])
            }
            ProxyMetrics.active?.denied(.proxyTLS)
            close()
            return false
        }
        guard
            let link = server.link(
                fd: channel.fd, prefix: prefix, localHost: localIPAddress(of: channel.fd) ?? "localhost")
        else {
            logger.warning(
                "cannot start TLS with a client of the proxy",
                metadata: ["client": "\(peer)", "cause": "\(openSSLError())"])
            close()
            return false
        }
        channel.layer(link)
        return true
    }

    /// A read through the proxy's own TLS failed: a failed handshake is logged (the usual cause: the client does
    /// not trust the proxy's certificate).
    func proxyTLSFailed() {
        guard let link = channel.secure as? ProxyTLSLink, let failure = link.failure else { return }
        let name = link.servedName ?? link.fallbackHost
        if failure.untrusted {
            logger.warning(
                "client did not trust the proxy's TLS certificate",
                metadata: [
                    "client": "\(peer)", "name": "\(name)",
                    "cause": "\(failure.message)", "certificate": "\(context.proxyTLS?.source.summary ?? "-")",
                    "hint":
                        "make the client trust it (curl --proxy-cacert; the CA of [proxy] tls_cert, or [tls] ca_cert when minted)",
                ])
        } else {
            logger.warning(
                "TLS handshake with a client of the proxy failed",
                metadata: [
                    "client": "\(peer)", "name": "\(name)",
                    "cause": "\(failure.message)",
                ])
        }
    }

    /// The client finished the proxy's TLS handshake, then closed before a request: clients that check the
    /// certificate after the handshake (GnuTLS) do that when they do not trust it.
    func closedAfterProxyHandshake() {
        guard let link = channel.secure as? ProxyTLSLink, link.handshakeDone else { return }
        logger.warning(
            "client closed its TLS connection to the proxy after the handshake without a request",
            metadata: [
                "client": "\(peer)", "name": "\(link.servedName ?? link.fallbackHost)",
                "hint":
                    "the client may not trust the proxy's TLS certificate (GnuTLS and Node check it after the handshake and close without an alert)",
            ])
    }

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
                    logger.warning(
                        "client did not trust the authproxy CA",
                        metadata: [
                            "client": "\(peer)",
                            "host": "\(tls.servedName ?? tls.fallbackHost)", "cause": "\(message)",
                            "hint": "make the client trust the CA in [tls] ca_cert",
                        ])
                } else {
                    logger.warning(
                        "TLS handshake with client failed",
                        metadata: [
                            "client": "\(peer)",
                            "host": "\(tls.servedName ?? tls.fallbackHost)", "cause": "\(message)",
                        ])
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
        logger.warning(
            "client closed the intercepted connection after the TLS handshake without a request",
            metadata: [
                "client": "\(peer)", "host": "\(tls.servedName ?? tls.fallbackHost)",
                "hint":
                    "the client may not trust the authproxy CA (GnuTLS and Node check it after the handshake and close without an alert): make it trust [tls] ca_cert",
            ])
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
            logger.warning(
                "cannot start TLS for an intercepted tunnel",
                metadata: ["client": "\(peer)", "host": "\(ic.host):\(ic.port)"])
            logAccess(status: 500, started: ic.connectStarted)
            close()
            return
        }
        logAccess(status: 200, started: ic.connectStarted)
        detachExchange()
        ic.session = session
        machine.tlsHandshakeStarted()
        // The ClientHello (and whatever followed it) is in the input buffer.
        inbuf.withUnreadBytes { session.feed($0) }
        inbuf.removeAll()
        _ = pullTLS()
    }
}
