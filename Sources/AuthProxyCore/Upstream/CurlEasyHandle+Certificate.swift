import CAuthProxyShims
import CCurl

/// A client certificate on a handle: the one place `certificate` settings become `CURLOPT_SSLCERT*`, for a libcurl
/// transfer and for a connection the own client gets from the ``Connector`` alike.
extension CurlEasyHandle {
    /// Presents `c` in the TLS handshakes this handle makes. The handle is marked for a reset before reuse.
    func applyClientCertificate(_ c: ClientCertificateSettings) {
        markCarriesCredential()
        let e = raw
        if let m = c.material {
            // The bytes checked when they were loaded (``ClientCertificateMaterial``): libcurl matches pooled
            // connections and TLS sessions by them, so a renewed certificate never reuses the old one's.
            Self.setBlob(e, CURLOPT_SSLCERT_BLOB, m.cert)
            ap_easy_setopt_ptr(e, CURLOPT_SSLCERTTYPE, m.key == nil ? "P12" : "PEM")
            if let key = m.key {
                Self.setBlob(e, CURLOPT_SSLKEY_BLOB, key)
                ap_easy_setopt_ptr(e, CURLOPT_SSLKEYTYPE, "PEM")
            }
            if let pw = m.key == nil ? c.password : c.keyPassword { ap_easy_setopt_ptr(e, CURLOPT_KEYPASSWD, pw) }
        } else if let file = c.file {
            ap_easy_setopt_ptr(e, CURLOPT_SSLCERT, file)
            ap_easy_setopt_ptr(e, CURLOPT_SSLCERTTYPE, "P12")
            if let pw = c.password { ap_easy_setopt_ptr(e, CURLOPT_KEYPASSWD, pw) }
        } else if let cert = c.cert, let key = c.key {
            ap_easy_setopt_ptr(e, CURLOPT_SSLCERT, cert)
            ap_easy_setopt_ptr(e, CURLOPT_SSLCERTTYPE, "PEM")
            ap_easy_setopt_ptr(e, CURLOPT_SSLKEY, key)
            if let pw = c.keyPassword { ap_easy_setopt_ptr(e, CURLOPT_KEYPASSWD, pw) }
        }
    }

    /// Sets a blob option; libcurl copies the bytes.
    private static func setBlob(_ e: UnsafeMutableRawPointer, _ option: CURLoption, _ bytes: [UInt8]) {
        bytes.withUnsafeBytes { b in
            var blob = curl_blob(
                data: UnsafeMutableRawPointer(mutating: b.baseAddress), len: b.count, flags: UInt32(CURL_BLOB_COPY))
            _ = ap_easy_setopt_ptr(e, option, &blob)
        }
    }
}
