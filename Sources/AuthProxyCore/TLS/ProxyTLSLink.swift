import CAuthProxyShims
import COpenSSL

#if canImport(Glibc)
    import Glibc
#endif

/// TLS between a client and the proxy listener itself (the client's proxy URL is `https://`): the layer under a
/// client connection's ``SocketChannel`` (``SecureStream``), so everything above it (requests, CONNECT, blind
/// tunnels, the interception of a tunnel, which is then TLS inside this TLS) runs as on a plain connection.
///
/// OpenSSL writes to the socket itself and, once the first bytes are used up, reads from it itself: records the
/// client has not sent in full stay in the kernel, so the channel's read source reports them like plain bytes,
/// and a write that would block is offered again by the channel (the same bytes, at least as many:
/// `SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER` and `SSL_MODE_ENABLE_PARTIAL_WRITE` are set on the context). The
/// first bytes (the ClientHello, read before anyone knew it was TLS) are fed from a memory BIO, which is
/// replaced by the socket when it is empty.
///
/// Confined to the connection's loop queue, like its channel.
final class ProxyTLSLink: SecureStream, TLSCertificateNaming {
    private let ssl: OpaquePointer
    private let fd: Int32
    /// Holds the bytes read before the layer existed; nil once they are used up and OpenSSL reads the socket.
    private var prefix: OpaquePointer?
    private(set) var handshakeDone = false
    /// Why the handshake failed (read by the connection for its log line), and whether the client refused the
    /// certificate.
    private(set) var failure: (message: String, untrusted: Bool)?
    /// Certificate name when the client sends no SNI: the address it connected to (minted certificates only).
    let fallbackHost: String
    var servedName: String?
    private var released = false

    /// `ctx`: a server context (certificate, or a minting callback that asks this link for names); `prefix`: the
    /// bytes already read from `fd`.
    init?(ctx: OpaquePointer, fd: Int32, prefix: UnsafeRawBufferPointer, fallbackHost: String) {
        guard let ssl = SSL_new(ctx) else { return nil }
        self.ssl = ssl
        self.fd = fd
        self.fallbackHost = fallbackHost
        // Every stored property is set by now: a failure here runs deinit, which frees `ssl`.
        guard SSL_set_wfd(ssl, fd) == 1, let mem = BIO_new(BIO_s_mem()) else { return nil }
        if !prefix.isEmpty { _ = BIO_write(mem, prefix.baseAddress, Int32(prefix.count)) }
        SSL_set0_rbio(ssl, mem)
        self.prefix = mem
        ap_ssl_ignore_unexpected_eof(ssl)
        SSL_set_accept_state(ssl)
        SSL_set_ex_data(ssl, 0, Unmanaged.passUnretained(self).toOpaque())
    }

    deinit {
        // Backstop: the channel's cancel handlers call closeDescriptor(); a link never installed frees its SSL here.
        if !released { freeServerSSL(ssl) }
    }

    /// When the first bytes are used up, OpenSSL reads the socket from now on (the memory BIO is freed).
    /// Returns true when it switched, so the caller retries the operation that wanted more input.
    private func switchToSocket() -> Bool {
        guard let mem = prefix, ap_bio_pending(mem) == 0 else { return false }
        prefix = nil
        // Reuses the write side's socket BIO, and frees the memory BIO.
        return SSL_set_rfd(ssl, fd) == 1
    }

    /// Decrypted bytes until `buffer` is full or the socket has no more for now, so a short read means what it
    /// means on a plain socket (the kernel had nothing more): a caller that waits for the next read event after a
    /// short read never leaves a record behind in OpenSSL.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> SocketChannel.ReadResult {
        guard !released else { return .error(EBADF) }
        if !handshakeDone {
            while true {
                ERR_clear_error()
                let r = SSL_do_handshake(ssl)
                if r == 1 {
                    handshakeDone = true
                    break
                }
                let e = SSL_get_error(ssl, r)
                if e == SSL_ERROR_WANT_READ, switchToSocket() { continue }
                if e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE { return .wouldBlock }
                if e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0 && errno == 0) {
                    return .eof
                }
                failure = tlsHandshakeFailure(sslError: e)
                return .error(EPROTO)
            }
        }
        var filled = 0
        while filled < buffer.count {
            ERR_clear_error()
            let r = SSL_read(ssl, buffer.baseAddress! + filled, Int32(min(buffer.count - filled, Int(Int32.max))))
            if r > 0 {
                filled += Int(r)
                continue
            }
            let e = SSL_get_error(ssl, r)
            if e == SSL_ERROR_WANT_READ, switchToSocket() { continue }
            if filled > 0 { return .bytes(filled) }
            switch e {
            case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE: return .wouldBlock
            case SSL_ERROR_ZERO_RETURN: return .eof
            case SSL_ERROR_SYSCALL:
                let code = errno
                return code == 0 || code == EAGAIN ? .eof : .error(code)
            default: return .error(EPROTO)
            }
        }
        return .bytes(filled)
    }

    /// Nothing goes out before the handshake is done (the only writes then are a 408 or an error for input that
    /// was never a request, which a TLS client could not read): it is refused, so the channel closes instead of
    /// waiting on a write source for a handshake that needs input.
    func send(_ bytes: UnsafeRawBufferPointer, error: inout Int32) -> Int {
        guard !released, handshakeDone else {
            error = EPROTO
            return -1
        }
        ERR_clear_error()
        let r = SSL_write(ssl, bytes.baseAddress, Int32(min(bytes.count, Int(Int32.max))))
        if r > 0 { return Int(r) }
        switch SSL_get_error(ssl, r) {
        case SSL_ERROR_WANT_WRITE: return 0
        case SSL_ERROR_SYSCALL:
            error = errno == 0 ? EPIPE : errno
            return -1
        default:
            // WANT_READ would need input before output (renegotiation, which the context refuses): not waited for.
            error = EPROTO
            return -1
        }
    }

    var hasBufferedInput: Bool { !released && (SSL_pending(ssl) > 0 || prefix.map { ap_bio_pending($0) > 0 } ?? false) }

    func willShutdownWrite() {
        guard !released, handshakeDone else { return }
        ERR_clear_error()
        _ = SSL_shutdown(ssl)
    }

    func closeDescriptor() {
        guard !released else { return }
        released = true
        freeServerSSL(ssl)
        Glibc.close(fd)
    }
}
