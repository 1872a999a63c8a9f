import CAuthProxyShims
import COpenSSL
import Logging

/// The TLS server side of interception: one SSL_CTX (TLS 1.2 and 1.3, ALPN `http/1.1` only, so a client
/// that would prefer h2 falls back politely) whose certificate callback picks the minted leaf for the SNI
/// name (or the CONNECT host when the client sends no SNI) at handshake time.
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
        SSL_CTX_set_cert_cb(ctx, tlsCertCallback, Unmanaged.passUnretained(self).toOpaque())
        SSL_CTX_set_alpn_select_cb(ctx, tlsALPNCallback, nil)
    }

    deinit { SSL_CTX_free(ctx) }

    /// Installs the leaf for this handshake. Returns 1 on success. The SSL's ex_data 0 is the connection's
    /// ``TLSCertificateNaming`` (an intercepted tunnel's ``TLSSession``, or a ``ProxyTLSLink`` when a client opens
    /// TLS to the proxy itself).
    fileprivate func selectCertificate(_ ssl: OpaquePointer) -> Int32 {
        guard let raw = SSL_get_ex_data(ssl, 0),
            let session = Unmanaged<AnyObject>.fromOpaque(raw).takeUnretainedValue() as? any TLSCertificateNaming
        else { return 0 }
        var name = session.fallbackHost
        if let sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name) {
            let s = String(cString: sni)
            if !s.isEmpty { name = s }
        }
        // An SNI that is not a valid host name gets the CONNECT host's certificate (the client will reject it).
        guard let leaf = minter.leaf(for: name) ?? minter.leaf(for: session.fallbackHost) else { return 0 }
        session.servedName = name
        defer { X509_free(leaf) }
        guard SSL_use_certificate(ssl, leaf) == 1, SSL_use_PrivateKey(ssl, minter.key) == 1 else { return 0 }
        return 1
    }
}

private func tlsCertCallback(_ ssl: OpaquePointer?, _ arg: UnsafeMutableRawPointer?) -> Int32 {
    guard let ssl, let arg else { return 0 }
    return Unmanaged<TLSServer>.fromOpaque(arg).takeUnretainedValue().selectCertificate(ssl)
}

/// The object a ``TLSServer`` asks, at handshake time, which name to mint for when the client sends no SNI, and
/// tells which name it minted for (for log lines).
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

    deinit { SSL_free(ssl) }

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
