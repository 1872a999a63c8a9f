import CAuthProxyShims
import COpenSSL

/// The proxy listener's own TLS (the proxy over TLS): the server context for clients whose proxy URL is
/// `https://`, made from the ``ProxyTLSSource``: a certificate and key from files, loaded into a context of its
/// own, or the interception ``TLSServer``'s context, whose certificate callback mints a leaf for the name the
/// client sends or, without SNI, for the address it connected to (``ProxyTLSLink/fallbackHost``).
///
/// Built per configuration generation (a reload reads the files again, so a renewed certificate is picked up);
/// a connection keeps the context its link was made from.
///
/// Ownership: the context is configured in `init` and only read afterwards (OpenSSL contexts are safe to share
/// between threads), so every loop may make links from it.
public final class ProxyTLSServer: @unchecked Sendable {
    public let source: ProxyTLSSource
    /// SSL_CTX*: our own (files), or the minting server's (kept alive by ``minting``).
    private let ctx: OpaquePointer
    private let minting: TLSServer?

    /// A context with the certificate chain in `certPath` and the key in `keyPath` (PEM, unencrypted).
    public init(certPath: String, keyPath: String) throws(TLSError) {
        guard let ctx = SSL_CTX_new(TLS_server_method()) else {
            throw TLSError("SSL_CTX_new failed: \(openSSLError())")
        }
        guard SSL_CTX_use_certificate_chain_file(ctx, certPath) == 1 else {
            SSL_CTX_free(ctx)
            throw TLSError("cannot use \(certPath) as the proxy's certificate: \(openSSLError())")
        }
        // Read here rather than with SSL_CTX_use_PrivateKey_file, so the errors can tell an unreadable or
        // encrypted key from one that belongs to another certificate.
        guard let bio = BIO_new_file(keyPath, "r") else {
            SSL_CTX_free(ctx)
            throw TLSError("cannot read the proxy's TLS key \(keyPath): \(lastErrorString())")
        }
        let key = ap_pem_read_private_key(bio, nil)
        BIO_free(bio)
        guard let key else {
            SSL_CTX_free(ctx)
            _ = openSSLError()
            let encrypted = readTextFile(keyPath).map { $0.contains("ENCRYPTED") } ?? false
            throw TLSError(
                encrypted
                    ? "\(keyPath) is encrypted: the proxy needs its TLS key without a passphrase (keep it 0600)"
                    : "\(keyPath) is not a PEM private key")
        }
        defer { EVP_PKEY_free(key) }
        guard SSL_CTX_use_PrivateKey(ctx, key) == 1, SSL_CTX_check_private_key(ctx) == 1 else {
            SSL_CTX_free(ctx)
            _ = openSSLError()
            throw TLSError("\(keyPath) does not belong to \(certPath)")
        }
        _ = ap_ssl_ctx_set_min_proto(ctx, TLS1_2_VERSION)
        _ = ap_ssl_ctx_set_mode(ctx, Int(SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_ENABLE_PARTIAL_WRITE))
        ap_ssl_ctx_harden(ctx)
        // One certificate: every session of this context is for it.
        guard TLSResumption.enable(ctx), ap_ssl_ctx_set_session_context(ctx, "authproxy listener: " + certPath) == 1
        else {
            SSL_CTX_free(ctx)
            throw TLSError("cannot set up TLS session resumption: \(openSSLError())")
        }
        SSL_CTX_set_alpn_select_cb(ctx, tlsALPNCallback, nil)
        self.ctx = ctx
        minting = nil
        source = .files(cert: certPath, key: keyPath)
    }

    /// Certificates minted by the interception CA's server (which sets the same protocol versions, modes and ALPN).
    init(minting server: TLSServer, caCert: String) {
        ctx = server.ctx
        minting = server
        source = .interceptionCA(cert: caCert)
    }

    deinit {
        if minting == nil { SSL_CTX_free(ctx) }
    }

    /// The TLS layer for a client connection on `fd` whose first bytes, `prefix`, were a ClientHello; `localHost`
    /// is the address the client connected to (the name minted for without SNI).
    func link(fd: Int32, prefix: UnsafeRawBufferPointer, localHost: String) -> ProxyTLSLink? {
        ProxyTLSLink(ctx: ctx, fd: fd, prefix: prefix, fallbackHost: localHost)
    }

    /// The server for `config`, or nil when it has no certificate source. Throws when the files cannot be used.
    static func make(_ config: ProxyConfig, interception: TLSServer?) throws(TLSError) -> ProxyTLSServer? {
        switch ProxyTLSSource.choose(config) {
        case .files(let cert, let key):
            return try ProxyTLSServer(certPath: cert, keyPath: key)
        case .interceptionCA(let ca):
            return interception.map { ProxyTLSServer(minting: $0, caCert: ca) }
        case .none:
            return nil
        }
    }
}
