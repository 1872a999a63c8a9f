import CAuthProxyShims
import COpenSSL

#if canImport(Glibc)
    import Glibc
#endif

/// Loads a client certificate's files the way libcurl will use them, and checks them, so a wrong password, an
/// unreadable file or a key that belongs to another certificate is reported by `authproxy check`, at start-up and
/// when a renewed file is looked at (``CertificateRenewal``), instead of on the first request.
///
/// The bytes checked are the bytes used: the result (``ClientCertificateMaterial``) holds the files' contents as
/// read once, which libcurl gets as blobs, so a file replaced between the check and a connection can never be used
/// unchecked.
enum ClientCertificateCheck {
    /// Why the files of `s` cannot be used, nil when they can.
    static func validate(_ s: ClientCertificateSettings) -> String? {
        if case .failure(let problem) = load(s) { return problem.message }
        return nil
    }

    /// A client certificate whose files could not be used: the file at fault (as configured) and why.
    struct Problem: Error, Equatable {
        var file: String
        var message: String
    }

    /// Reads the files of `s` and checks them: a PKCS#12 file that opens with `password` and holds a certificate,
    /// or a PEM certificate and a PEM key (decrypted with `key_password`) that belongs to it.
    static func load(_ s: ClientCertificateSettings) -> Result<ClientCertificateMaterial, Problem> {
        if let file = s.file {
            guard let bytes = readFileBytes(file) else {
                return .failure(Problem(file: file, message: "cannot read '\(file)': \(lastErrorString())"))
            }
            return check(p12: bytes, password: s.password, file: file).map { notAfter in
                ClientCertificateMaterial(cert: bytes, key: nil, notAfter: notAfter)
            }
        }
        guard let certPath = s.cert, let keyPath = s.key else {
            return .failure(Problem(file: s.cert ?? s.key ?? "", message: "needs file (PKCS#12) or cert and key (PEM)"))
        }
        guard let cert = readFileBytes(certPath) else {
            return .failure(Problem(file: certPath, message: "cannot read '\(certPath)': \(lastErrorString())"))
        }
        guard let key = readFileBytes(keyPath) else {
            return .failure(Problem(file: keyPath, message: "cannot read '\(keyPath)': \(lastErrorString())"))
        }
        return check(pemCert: cert, key: key, keyPassword: s.keyPassword, certPath: certPath, keyPath: keyPath).map {
            notAfter in ClientCertificateMaterial(cert: cert, key: key, notAfter: notAfter)
        }
    }

    /// A PKCS#12 file's certificate expiry (milliseconds since the epoch) when it opens with `password`.
    static func check(p12 bytes: [UInt8], password: String?, file: String) -> Result<Int64?, Problem> {
        withBIO(bytes) { bio in
            guard let p12 = d2i_PKCS12_bio(bio, nil) else {
                _ = openSSLError()
                return .failure(Problem(file: file, message: "'\(file)' is not a PKCS#12 (.p12/.pfx) file"))
            }
            defer { PKCS12_free(p12) }
            var key: OpaquePointer? = nil
            var cert: OpaquePointer? = nil
            guard PKCS12_parse(p12, password ?? "", &key, &cert, nil) == 1 else {
                _ = openSSLError()
                return .failure(Problem(file: file, message: "cannot open '\(file)': wrong password or damaged file"))
            }
            if let key { EVP_PKEY_free(key) }
            guard let cert else { return .failure(Problem(file: file, message: "'\(file)' holds no certificate")) }
            defer { X509_free(cert) }
            if key == nil { return .failure(Problem(file: file, message: "'\(file)' holds no private key")) }
            return .success(notAfterMillis(cert))
        }
    }

    /// A PEM certificate's expiry when `key` is a PEM key (decrypted with `keyPassword`) that belongs to it.
    static func check(pemCert: [UInt8], key: [UInt8], keyPassword: String?, certPath: String, keyPath: String)
        -> Result<Int64?, Problem>
    {
        withBIO(pemCert) { cbio in
            guard let cert = PEM_read_bio_X509(cbio, nil, nil, nil) else {
                _ = openSSLError()
                return .failure(Problem(file: certPath, message: "'\(certPath)' is not a PEM certificate"))
            }
            defer { X509_free(cert) }
            return withBIO(key) { kbio in
                let k = keyPassword.map { ap_pem_read_private_key(kbio, $0) } ?? ap_pem_read_private_key(kbio, nil)
                guard let k else {
                    _ = openSSLError()
                    return .failure(
                        Problem(
                            file: keyPath,
                            message: "cannot read the key '\(keyPath)': wrong key_password or not a PEM key"))
                }
                defer { EVP_PKEY_free(k) }
                guard X509_check_private_key(cert, k) == 1 else {
                    _ = openSSLError()
                    return .failure(
                        Problem(file: keyPath, message: "'\(keyPath)' does not belong to '\(certPath)'"))
                }
                return .success(notAfterMillis(cert))
            }
        }
    }

    /// `notAfter` of `cert`, in milliseconds since the epoch.
    static func notAfterMillis(_ cert: OpaquePointer) -> Int64? {
        guard let t = X509_get0_notAfter(cert) else { return nil }
        var tm = tm()
        guard ASN1_TIME_to_tm(t, &tm) == 1 else { return nil }
        return Int64(timegm(&tm)) * 1000
    }

    private static func withBIO<T>(_ bytes: [UInt8], _ body: (OpaquePointer) -> T) -> T {
        bytes.withUnsafeBytes { b in
            // A read-only memory BIO over the bytes (never written through).
            let bio = BIO_new_mem_buf(b.baseAddress, Int32(b.count))!
            defer { BIO_free(bio) }
            return body(bio)
        }
    }
}
