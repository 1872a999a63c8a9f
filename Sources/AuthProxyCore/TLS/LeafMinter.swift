import CAuthProxyShims
import COpenSSL
import Logging

/// Mints the certificates shown to clients of intercepted hosts: one per host name (or IP literal), signed by
/// the proxy's CA, 30 days valid (backdated an hour for clock skew), `serverAuth`, SAN always present, all
/// sharing one EC P-256 key (a key per leaf would cost milliseconds; minting with a shared key ~0.5 ms).
/// Leaves are cached in a bounded LRU and shared by every event loop.
///
/// Ownership: the cache is only touched under `lock`; the CA and the shared key are immutable.
public final class LeafMinter: @unchecked Sendable {
    let ca: CertificateAuthority
    /// The shared leaf key (EVP_PKEY*), immutable.
    let key: OpaquePointer
    private let logger: Logger
    private let capacity: Int
    private struct Cache {
        var leaves: [String: (cert: OpaquePointer, used: UInt64, minted: Int64)] = [:]
        var clock: UInt64 = 0
        var minted = 0
    }
    private var cache = Cache()
    private let lock = Lock()
    static let validitySeconds = 30 * 86400
    /// A cached leaf is re-minted this long after it was made, well before it expires.
    static let renewAfterMillis: Int64 = 25 * 86400 * 1000

    public init(ca: CertificateAuthority, logger: Logger, capacity: Int = 1000) throws(TLSError) {
        guard let k = ap_ec_p256_keygen() else { throw TLSError("cannot generate the leaf key") }
        self.ca = ca
        key = k
        self.logger = logger
        self.capacity = capacity
    }

    deinit {
        for (_, l) in cache.leaves { X509_free(l.cert) }
        EVP_PKEY_free(key)
    }

    /// How many leaves were minted so far (each host once while it stays cached).
    public var mintedCount: Int { lock.withLock { cache.minted } }

    /// The name a leaf is minted for when a client asks for `host`: lower-cased, or nil when it is neither a host
    /// name nor an IP literal (the name goes into an X.509 extension string).
    static func certificateName(_ host: String) -> String? {
        let name = host.lowercased()
        guard !name.isEmpty, name.utf8.count <= 253,
            name.utf8.allSatisfy({ isRegNameChar($0) && $0 != UInt8(ascii: "%") }) || isNumericAddress(name)
        else { return nil }
        return name
    }

    /// The name whose leaf a handshake gets: the client's SNI when it is a usable name, else `fallback` (the CONNECT
    /// host, or the listener's address): a client that sends a bad SNI gets a certificate it will reject.
    static func certificateName(sni: String?, fallback: String) -> String? {
        sni.flatMap(certificateName) ?? certificateName(fallback)
    }

    /// The leaf for `host` (X509*, with a reference the caller must free).
    func leaf(for host: String) -> OpaquePointer? {
        guard let name = Self.certificateName(host) else { return nil }
        if let cert = lock.withLock({ () -> OpaquePointer? in
            guard let l = cache.leaves[name], nowMillis() - l.minted < Self.renewAfterMillis else { return nil }
            cache.clock += 1
            cache.leaves[name] = (l.cert, cache.clock, l.minted)
            X509_up_ref(l.cert)
            return l.cert
        }) {
            return cert
        }
        guard let fresh = mint(name) else {
            logger.error("cannot mint a certificate", metadata: ["host": "\(name)", "cause": "\(openSSLError())"])
            return nil
        }
        return lock.withLock { () -> OpaquePointer in
            if let existing = cache.leaves[name], nowMillis() - existing.minted < Self.renewAfterMillis {
                // another loop minted it meanwhile
                X509_free(fresh)
                X509_up_ref(existing.cert)
                return existing.cert
            }
            if let old = cache.leaves.removeValue(forKey: name) { X509_free(old.cert) }
            cache.minted += 1
            ProxyMetrics.active?.certificatesMinted.increment()
            cache.clock += 1
            if cache.leaves.count >= capacity, let oldest = cache.leaves.min(by: { $0.value.used < $1.value.used }) {
                X509_free(oldest.value.cert)
                cache.leaves.removeValue(forKey: oldest.key)
            }
            cache.leaves[name] = (fresh, cache.clock, nowMillis())
            X509_up_ref(fresh)
            logger.info("minted certificate", metadata: ["host": "\(name)", "minted_total": "\(cache.minted)"])
            return fresh
        }
    }

    private func mint(_ host: String) -> OpaquePointer? {
        guard let x = X509_new() else { return nil }
        let isIP = isNumericAddress(host)
        var ok = X509_set_version(x, 2) == 1
        ok = ok && ap_x509_set_random_serial(x) == 1
        ok = ok && ap_x509_set_validity(x, -3600, Self.validitySeconds) == 1
        // CN is limited to 64 characters; the SAN carries the name in any case. An IP address gets no CN:
        // OpenSSL checks a CN that looks like a host name against the CA's DNS name constraints, and a
        // constrained CA for IP hosts only permits no real DNS name (see CertificateAuthority.nameConstraints).
        ok = ok && ap_x509_set_names(x, !isIP && host.utf8.count <= 64 ? host : nil, "authproxy", ca.cert) == 1
        ok = ok && X509_set_pubkey(x, key) == 1
        ok = ok && ap_x509_add_ext(x, ca.cert, NID_basic_constraints, "critical,CA:FALSE") == 1
        ok = ok && ap_x509_add_ext(x, ca.cert, NID_key_usage, "critical,digitalSignature") == 1
        ok = ok && ap_x509_add_ext(x, ca.cert, NID_ext_key_usage, "serverAuth") == 1
        ok = ok && ap_x509_add_ext(x, ca.cert, NID_subject_alt_name, (isIP ? "IP:" : "DNS:") + host) == 1
        ok = ok && ap_x509_add_ext(x, ca.cert, NID_subject_key_identifier, "hash") == 1
        ok = ok && ap_x509_add_ext(x, ca.cert, NID_authority_key_identifier, "keyid:always") == 1
        ok = ok && X509_sign(x, ca.key, EVP_sha256()) > 0
        if !ok {
            X509_free(x)
            return nil
        }
        return x
    }
}
