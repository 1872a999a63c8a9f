import CAuthProxyShims
import COpenSSL

/// Loads a client certificate the way libcurl will, so a wrong password or an unreadable file is reported by
/// `authproxy check` and at start-up instead of on the first request.
enum ClientCertificateCheck {
    static func validate(_ s: ClientCertificateSettings) -> String? {
        if let file = s.file {
            guard let bio = BIO_new_file(file, "rb") else { return "cannot read '\(file)': \(lastErrorString())" }
            defer { BIO_free(bio) }
            guard let p12 = d2i_PKCS12_bio(bio, nil) else { return "'\(file)' is not a PKCS#12 (.p12/.pfx) file" }
            defer { PKCS12_free(p12) }
            var key: OpaquePointer? = nil
            var cert: OpaquePointer? = nil
            guard PKCS12_parse(p12, s.password ?? "", &key, &cert, nil) == 1 else {
                _ = openSSLError()
                return "cannot open '\(file)': wrong password or damaged file"
            }
            if let key { EVP_PKEY_free(key) }
            if let cert { X509_free(cert) } else { return "'\(file)' holds no certificate" }
            return nil
        }
        guard let certPath = s.cert, let keyPath = s.key else { return "needs file (PKCS#12) or cert and key (PEM)" }
        guard let cbio = BIO_new_file(certPath, "r") else { return "cannot read '\(certPath)': \(lastErrorString())" }
        defer { BIO_free(cbio) }
        guard let cert = PEM_read_bio_X509(cbio, nil, nil, nil) else { return "'\(certPath)' is not a PEM certificate" }
        defer { X509_free(cert) }
        guard let kbio = BIO_new_file(keyPath, "r") else { return "cannot read '\(keyPath)': \(lastErrorString())" }
        defer { BIO_free(kbio) }
        let key = s.keyPassword.map { ap_pem_read_private_key(kbio, $0) } ?? ap_pem_read_private_key(kbio, nil)
        guard let key else {
            _ = openSSLError()
            return "cannot read the key '\(keyPath)': wrong key_password or not a PEM key"
        }
        defer { EVP_PKEY_free(key) }
        guard X509_check_private_key(cert, key) == 1 else {
            _ = openSSLError()
            return "'\(keyPath)' does not belong to '\(certPath)'"
        }
        return nil
    }
}
