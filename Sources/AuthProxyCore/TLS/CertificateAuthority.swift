import CAuthProxyShims
import COpenSSL

#if canImport(Glibc)
    import Glibc
#endif

/// The proxy's own CA: it signs the leaf certificates shown to clients of intercepted hosts.
/// EC P-256, `CA:TRUE, pathlen:0`, `keyCertSign`; optionally name-constrained to the hosts the configuration
/// matches, so a leaked key cannot impersonate anything else.
///
/// Ownership: immutable after `init` (the key and certificate are only read, and OpenSSL's signing with a
/// shared key is thread-safe), so every loop may use it.
public final class CertificateAuthority: @unchecked Sendable {
    /// Immutable after `init` (X509*, EVP_PKEY*), so safe to share between event loops.
    let cert: OpaquePointer
    let key: OpaquePointer

    private init(cert: OpaquePointer, key: OpaquePointer) {
        self.cert = cert
        self.key = key
    }

    deinit {
        X509_free(cert)
        EVP_PKEY_free(key)
    }

    /// Loads `ca.pem` and `ca.key` (PEM).
    public static func load(certPath: String, keyPath: String) throws(TLSError) -> CertificateAuthority {
        guard let cbio = BIO_new_file(certPath, "r") else {
            throw TLSError("cannot read CA certificate \(certPath): \(lastErrorString())")
        }
        defer { BIO_free(cbio) }
        guard let cert = PEM_read_bio_X509(cbio, nil, nil, nil) else {
            throw TLSError("\(certPath) is not a PEM certificate")
        }
        guard let kbio = BIO_new_file(keyPath, "r") else {
            X509_free(cert)
            throw TLSError("cannot read CA key \(keyPath): \(lastErrorString())")
        }
        defer { BIO_free(kbio) }
        guard let key = ap_pem_read_private_key(kbio, nil) else {
            X509_free(cert)
            _ = openSSLError()
            let encrypted = readTextFile(keyPath).map { $0.contains("ENCRYPTED") } ?? false
            throw TLSError(
                encrypted
                    ? "\(keyPath) is encrypted: authproxy needs the CA key without a passphrase (keep it 0600, readable only by the proxy's user)"
                    : "\(keyPath) is not a PEM private key")
        }
        guard X509_check_private_key(cert, key) == 1 else {
            X509_free(cert)
            EVP_PKEY_free(key)
            throw TLSError("\(keyPath) does not belong to \(certPath)")
        }
        return CertificateAuthority(cert: cert, key: key)
    }

    /// Creates a new CA. `permitted` (hosts; `*.example.com` for subdomains; IP literals) adds X.509 Name
    /// Constraints; nil leaves the CA unconstrained.
    public static func create(commonName: String, permitted: [String]?) throws(TLSError) -> CertificateAuthority {
        guard let key = ap_ec_p256_keygen() else { throw TLSError("cannot generate an EC P-256 key") }
        guard let x = X509_new() else {
            EVP_PKEY_free(key)
            throw TLSError("X509_new failed")
        }
        var ok = X509_set_version(x, 2) == 1
        ok = ok && ap_x509_set_random_serial(x) == 1
        ok = ok && ap_x509_set_validity(x, -3600, 10 * 365 * 86400) == 1
        ok = ok && ap_x509_set_names(x, commonName, "authproxy", nil) == 1
        ok = ok && X509_set_pubkey(x, key) == 1
        ok = ok && ap_x509_add_ext(x, nil, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") == 1
        ok = ok && ap_x509_add_ext(x, nil, NID_key_usage, "critical,keyCertSign,cRLSign") == 1
        ok = ok && ap_x509_add_ext(x, nil, NID_subject_key_identifier, "hash") == 1
        if let permitted {
            ok = ok && ap_x509_add_ext(x, nil, NID_name_constraints, nameConstraints(permitted)) == 1
        }
        ok = ok && X509_sign(x, key, EVP_sha256()) > 0
        guard ok else {
            X509_free(x)
            EVP_PKEY_free(key)
            throw TLSError("cannot build the CA certificate: \(openSSLError())")
        }
        return CertificateAuthority(cert: x, key: key)
    }

    /// `critical,permitted;DNS:…,permitted;IP:…`. A name type with no permitted subtree is unconstrained
    /// (RFC 5280), so each gets one that matches nothing real: without IP literals among the hosts, IP names
    /// are limited to 0.0.0.0/32 and ::/128; without host names, DNS names to `invalid` (a reserved TLD, RFC 2606).
    static func nameConstraints(_ hosts: [String]) -> String {
        var parts: [String] = []
        var hasDNS = false
        var hasV4 = false
        var hasV6 = false
        for h in Set(hosts).sorted() {
            if h.hasPrefix("*.") {
                parts.append("permitted;DNS:" + h.dropFirst(2))
                hasDNS = true
            } else if h.contains(":") {
                parts.append("permitted;IP:\(h)/ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")
                hasV6 = true
            } else if isNumericAddress(h) {
                parts.append("permitted;IP:\(h)/255.255.255.255")
                hasV4 = true
            } else {
                parts.append("permitted;DNS:\(h)")
                hasDNS = true
            }
        }
        if !hasDNS { parts.append("permitted;DNS:invalid") }
        if !hasV4 { parts.append("permitted;IP:0.0.0.0/255.255.255.255") }
        if !hasV6 { parts.append("permitted;IP:::/ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff") }
        return "critical," + parts.joined(separator: ",")
    }

    public var certificatePEM: String { pem { PEM_write_bio_X509($0, cert) } }

    /// The CA certificate's subject, e.g. `CN=authproxy interception CA, O=authproxy` (for the status page).
    public var subject: String {
        pem { X509_NAME_print_ex($0, X509_get_subject_name(cert), 0, 0) }.split(separator: "\n").joined(separator: " ")
    }

    /// When the CA certificate expires, in milliseconds since the epoch.
    public var notAfterMillis: Int64? {
        guard let t = X509_get0_notAfter(cert) else { return nil }
        var tm = tm()
        guard ASN1_TIME_to_tm(t, &tm) == 1 else { return nil }
        return Int64(timegm(&tm)) * 1000
    }
    public var keyPEM: String { pem { PEM_write_bio_PrivateKey($0, key, nil, nil, 0, nil, nil) } }

    /// Writes `ca.pem` (0644) and `ca.key` (0600) into `dir`, refusing to overwrite an existing CA.
    public func write(toDirectory dir: String) throws(TLSError) -> (cert: String, key: String) {
        var partial = dir.hasPrefix("/") ? "" : "."
        for part in dir.split(separator: "/") {
            partial += "/" + part
            mkdir(partial, 0o700)
        }
        let certPath = dir + "/ca.pem"
        let keyPath = dir + "/ca.key"
        if access(certPath, F_OK) == 0 || access(keyPath, F_OK) == 0 {
            throw TLSError("\(dir) already holds a CA (ca.pem/ca.key); remove them first to make a new one")
        }
        try writeFile(keyPath, keyPEM, mode: 0o600)
        try writeFile(certPath, certificatePEM, mode: 0o644)
        return (certPath, keyPath)
    }

    private func pem(_ body: (OpaquePointer) -> Int32) -> String {
        guard let bio = BIO_new(BIO_s_mem()) else { return "" }
        defer { BIO_free(bio) }
        _ = body(bio)
        let n = Int(ap_bio_pending(bio))
        var buf = [UInt8](repeating: 0, count: n)
        _ = BIO_read(bio, &buf, Int32(n))
        return String(decoding: buf, as: UTF8.self)
    }
}

public struct TLSError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ d: String) { description = d }
}

func openSSLError() -> String {
    var buf = [CChar](repeating: 0, count: 256)
    _ = ap_ssl_last_error(&buf, Int32(buf.count))
    return String(nulTerminated: buf)
}

func writeFile(_ path: String, _ text: String, mode: mode_t) throws(TLSError) {
    let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
    guard fd >= 0 else { throw TLSError("cannot create \(path): \(lastErrorString())") }
    defer { close(fd) }
    fchmod(fd, mode)
    var s = text
    let ok = s.withUTF8 { b in write(fd, b.baseAddress, b.count) == b.count }
    if !ok { throw TLSError("cannot write \(path): \(lastErrorString())") }
}
