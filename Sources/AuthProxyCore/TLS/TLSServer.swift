import CAuthProxyShims
import COpenSSL
import Logging

/// The TLS server side of interception: one SSL_CTX (TLS 1.2 and 1.3, ALPN `http/1.1` only, so a client
/// that would prefer h2 falls back politely) whose certificate callback picks the minted leaf for the SNI
/// name (or the CONNECT host when the client sends no SNI) at handshake time.
///
/// Returning clients resume their sessions (``TLSResumption``). One context serves every host, and OpenSSL does
/// not tie a TLS 1.3 session to the SNI it was made under: the ClientHello callback, which runs before OpenSSL
/// looks at a ticket or a session ID, sets the connection's session ID context to the name whose leaf it will
/// get, so a session resumes only for the certificate it was made with.
///
/// Ownership: the `SSL_CTX` is configured in `init` and only read afterwards (OpenSSL allows one context to
/// create sessions on many threads); per-connection state lives in each loop's `TLSSession`.
public final class TLSServer: @unchecked Sendable {
    /// SSL_CTX*, configured once in `init` and then only read (OpenSSL contexts are safe to share).
    let ctx: OpaquePointer
    let minter: LeafMinter

    public init(minter: LeafMinter) throws(TLSError) {
        guard let ctx = SSL_CTX_new(TLS_server_method()) else {
            throw TLSError("SSL_CTX_new failed: \(openSSLError())")
        }
        self.ctx = ctx
        self.minter = minter
        _ = ap_ssl_ctx_set_min_proto(ctx, TLS1_2_VERSION)
        _ = ap_ssl_ctx_set_mode(ctx, Int(SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_ENABLE_PARTIAL_WRITE))
        ap_ssl_ctx_harden(ctx)
        // A connection whose name is not known yet has a context no session was made under.
        guard TLSResumption.enable(ctx), ap_ssl_ctx_set_session_context(ctx, "authproxy: no certificate name") == 1
        else {
            SSL_CTX_free(ctx)
            throw TLSError("cannot set up TLS session resumption: \(openSSLError())")
        }
        let me = Unmanaged.passUnretained(self).toOpaque()
        SSL_CTX_set_client_hello_cb(ctx, tlsClientHelloCallback, me)
        SSL_CTX_set_cert_cb(ctx, tlsCertCallback, me)
        SSL_CTX_set_alpn_select_cb(ctx, tlsALPNCallback, nil)
    }

    deinit { SSL_CTX_free(ctx) }

    /// The connection's ``TLSCertificateNaming`` (an intercepted tunnel's ``TLSSession``, or a ``ProxyTLSLink``
    /// when a client opens TLS to the proxy itself): the SSL's ex_data 0.
    private static func naming(_ ssl: OpaquePointer) -> (any TLSCertificateNaming)? {
        guard let raw = SSL_get_ex_data(ssl, 0) else { return nil }
        return Unmanaged<AnyObject>.fromOpaque(raw).takeUnretainedValue() as? any TLSCertificateNaming
    }

    /// Decides the certificate's name from the ClientHello and binds session resumption to it (on a HelloRetryRequest
    /// this runs again, for the same name). Always lets the handshake go on: without a name, the certificate
    /// callback fails it.
    fileprivate func nameCertificate(_ ssl: OpaquePointer) {
        guard let session = Self.naming(ssl) else { return }
        var out: UnsafePointer<UInt8>?
        var length = 0
        var sni: String?
        if SSL_client_hello_get0_ext(ssl, UInt32(TLSEXT_TYPE_server_name), &out, &length) == 1, let out {
            sni = ServerNameExtension.hostName(UnsafeRawBufferPointer(start: out, count: length))
        }
        guard let name = LeafMinter.certificateName(sni: sni, fallback: session.fallbackHost) else { return }
        session.servedName = name
        _ = ap_ssl_set_session_context(ssl, "authproxy leaf: " + name)
    }

    /// Installs the leaf for this handshake (a full one: a resumed session keeps its certificate). Returns 1 on
    /// success.
    fileprivate func selectCertificate(_ ssl: OpaquePointer) -> Int32 {
        guard let name = Self.naming(ssl)?.servedName, let leaf = minter.leaf(for: name) else { return 0 }
        defer { X509_free(leaf) }
        guard SSL_use_certificate(ssl, leaf) == 1, SSL_use_PrivateKey(ssl, minter.key) == 1 else { return 0 }
        return 1
    }
}

private func tlsClientHelloCallback(
    _ ssl: OpaquePointer?, _ alert: UnsafeMutablePointer<Int32>?, _ arg: UnsafeMutableRawPointer?
) -> Int32 {
    if let ssl, let arg { Unmanaged<TLSServer>.fromOpaque(arg).takeUnretainedValue().nameCertificate(ssl) }
    return 1  // SSL_CLIENT_HELLO_SUCCESS
}

private func tlsCertCallback(_ ssl: OpaquePointer?, _ arg: UnsafeMutableRawPointer?) -> Int32 {
    guard let ssl, let arg else { return 0 }
    return Unmanaged<TLSServer>.fromOpaque(arg).takeUnretainedValue().selectCertificate(ssl)
}

/// Frees a server-side connection's SSL and keeps its session resumable. OpenSSL takes a session out of the
/// server's cache when its SSL is freed before a close_notify was sent, and most clients (browsers, Python, curl)
/// just close the socket: their TLS 1.2 session IDs would never resume. Since TLS 1.1 a connection closed without
/// close_notify need not end its session (RFC 5246 §7.2.1); a fatal alert still takes it out of the cache.
func freeServerSSL(_ ssl: OpaquePointer) {
    SSL_set_shutdown(ssl, SSL_get_shutdown(ssl) | SSL_SENT_SHUTDOWN)
    SSL_free(ssl)
}

/// Session resumption where the proxy is the TLS server (interception and the proxy's own TLS): TLS 1.3 and 1.2
/// session tickets, and TLS 1.2 session IDs, so a returning client skips the certificate and the signature of a
/// full handshake. Ticket keys live in memory only (a restart or a context made by a reload starts afresh); each
/// key encrypts for an hour and decrypts for two, and a session lives an hour.
enum TLSResumption {
    static let ticketKeySeconds = 3600
    /// The server's session-ID cache (TLS 1.2 clients that take no ticket); OpenSSL drops the oldest beyond it.
    static let sessionCacheSize = 10_000

    static func enable(_ ctx: OpaquePointer) -> Bool {
        ap_ssl_ctx_enable_resumption(ctx, ap_ticket_keys_new(ticketKeySeconds), sessionCacheSize) == 1
    }
}

/// The object a ``TLSServer`` asks, at handshake time, which name to mint for when the client sends no SNI, and
/// tells which name the certificate is for (the certificate callback mints it; log lines name it).
protocol TLSCertificateNaming: AnyObject {
    var fallbackHost: String { get }
    var servedName: String? { get set }
}

/// Why a server-side handshake failed, from the OpenSSL error queue (read once): the message, and whether the
/// client refused our certificate (it does not trust the CA that issued it).
func tlsHandshakeFailure(sslError e: Int32) -> (message: String, untrusted: Bool) {
    var buf = [CChar](repeating: 0, count: 256)
    let reason = ap_ssl_last_error(&buf, Int32(buf.count))
    let untrusted =
        reason == ap_ssl_reason_unknown_ca() || reason == ap_ssl_reason_bad_certificate()
        || reason == ap_ssl_reason_certificate_unknown()
    let message = String(nulTerminated: buf)
    return (message.isEmpty ? "TLS handshake failed (error \(e))" : message, untrusted)
}

/// Picks `http/1.1` from the client's ALPN list, or no ALPN at all (never h2).
func tlsALPNCallback(
    _ ssl: OpaquePointer?, _ out: UnsafeMutablePointer<UnsafePointer<UInt8>?>?, _ outlen: UnsafeMutablePointer<UInt8>?,
    _ input: UnsafePointer<UInt8>?, _ inlen: UInt32, _ arg: UnsafeMutableRawPointer?
) -> Int32 {
    guard let input, let out, let outlen else { return SSL_TLSEXT_ERR_NOACK }
    let want = Array("http/1.1".utf8)
    var i = 0
    let n = Int(inlen)
    while i < n {
        let len = Int(input[i])
        if len == want.count, i + 1 + len <= n, (0..<len).allSatisfy({ input[i + 1 + $0] == want[$0] }) {
            out.pointee = input + i + 1
            outlen.pointee = UInt8(len)
            return SSL_TLSEXT_ERR_OK
        }
        i += 1 + len
    }
    return SSL_TLSEXT_ERR_NOACK
}

/// One client TLS session over memory BIOs: the connection feeds it ciphertext read from the socket, takes
/// plaintext out, and writes the ciphertext it produces. Keeping OpenSSL off the socket keeps the Dispatch
/// source logic identical for plain and TLS clients.
final class TLSSession: TLSCertificateNaming {
    let ssl: OpaquePointer
    private let rbio: OpaquePointer
    private let wbio: OpaquePointer
    /// Certificate name when the client sends no SNI (the CONNECT host).
    let fallbackHost: String
    /// The name the leaf was minted for.
    var servedName: String?
    private(set) var handshakeDone = false
    /// Whether any application data (a request) came through since the handshake.
    private(set) var receivedData = false

    init?(server: TLSServer, host: String) {
        guard let ssl = SSL_new(server.ctx), let r = BIO_new(BIO_s_mem()), let w = BIO_new(BIO_s_mem()) else {
            return nil
        }
        self.ssl = ssl
        rbio = r
        wbio = w
        fallbackHost = host
        SSL_set_bio(ssl, r, w)
        SSL_set_accept_state(ssl)
        SSL_set_ex_data(ssl, 0, Unmanaged.passUnretained(self).toOpaque())
    }

    deinit { freeServerSSL(ssl) }

    func feed(_ bytes: UnsafeRawBufferPointer) {
        guard !bytes.isEmpty else { return }
        _ = BIO_write(rbio, bytes.baseAddress, Int32(bytes.count))
    }

    var bufferedCiphertext: Int { Int(ap_bio_pending(rbio)) }
    var hasBufferedInput: Bool { SSL_pending(ssl) > 0 || bufferedCiphertext > 0 }

    enum HandshakeResult {
        case needMore
        case done
        /// `untrusted`: the client refused our certificate (it does not trust the authproxy CA).
        case failed(String, untrusted: Bool)
    }

    func handshake() -> HandshakeResult {
        // The thread's error queue is shared with libcurl's own TLS work on this loop: SSL_get_error is only
        // reliable when the queue is empty before the call.
        ERR_clear_error()
        let r = SSL_do_handshake(ssl)
        if r == 1 {
            handshakeDone = true
            return .done
        }
        let e = SSL_get_error(ssl, r)
        if e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE { return .needMore }
        let failure = tlsHandshakeFailure(sslError: e)
        return .failed(failure.message, untrusted: failure.untrusted)
    }

    enum ReadResult {
        case bytes(Int)
        case wantMore
        case closed
        case failed(String)
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> ReadResult {
        ERR_clear_error()
        let r = SSL_read(ssl, buffer.baseAddress, Int32(buffer.count))
        if r > 0 {
            receivedData = true
            return .bytes(Int(r))
        }
        switch SSL_get_error(ssl, r) {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE: return .wantMore
        case SSL_ERROR_ZERO_RETURN: return .closed
        default: return .failed(openSSLError())
        }
    }

    /// Encrypts `bytes` into the outgoing buffer (a memory BIO takes everything).
    func write(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var off = 0
        ERR_clear_error()
        while off < bytes.count {
            let r = SSL_write(ssl, bytes.baseAddress! + off, Int32(min(bytes.count - off, 1 << 30)))
            if r <= 0 { return false }
            off += Int(r)
        }
        return true
    }

    /// Hands the ciphertext produced so far to `sink`, read out through `buffer` (the loop's, used by nothing
    /// else while this runs). Called after every read and write, so it must cost nothing when there is nothing to
    /// send: a buffer made here (32 KiB allocated and zeroed per call) showed in the intercepted path's profile
    /// as malloc, memset and malloc_consolidate (docs/BENCHMARKS.md).
    func drain(through buffer: UnsafeMutableRawBufferPointer, _ sink: (UnsafeRawBufferPointer) -> Void) {
        while ap_bio_pending(wbio) > 0 {
            let n = BIO_read(wbio, buffer.baseAddress, Int32(buffer.count))
            if n <= 0 { return }
            sink(UnsafeRawBufferPointer(rebasing: buffer[0..<Int(n)]))
        }
    }

    /// Queues a close_notify.
    func shutdown() {
        if handshakeDone {
            ERR_clear_error()
            _ = SSL_shutdown(ssl)
        }
    }
}
