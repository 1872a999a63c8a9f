/// A client certificate's files as they were read and checked (``ClientCertificateCheck``): what libcurl gets, as
/// blobs, for every connection made with the certificate.
///
/// Blobs, not paths, for two reasons. libcurl would read a path again for each new connection, so a file renewed
/// on disk would be used unchecked (half-written, or a new certificate beside the old key) and the status page's
/// expiry would describe another certificate than the one sent. And libcurl keys its pooled connections and its
/// TLS sessions by the blob's contents (by a path, it would go on reusing connections and resuming sessions made
/// with the old certificate): a renewed certificate (``digest`` differs) gets new connections, and the pooled ones
/// made with the old one are never handed out again.
///
/// Holds a private key: never logged; the digest only keeps connections apart.
public struct ClientCertificateMaterial: Sendable, Equatable {
    /// The PKCS#12 file (`file`), or the PEM certificate (chain) (`cert`).
    public var cert: [UInt8]
    /// The PEM key (`key`); nil for PKCS#12.
    public var key: [UInt8]?
    /// The certificate's `notAfter`, milliseconds since the epoch.
    public var notAfter: Int64?
    /// SHA-256 over the contents: compared instead of the bytes.
    public let digest: String

    public init(cert: [UInt8], key: [UInt8]?, notAfter: Int64?) {
        self.cert = cert
        self.key = key
        self.notAfter = notAfter
        digest = Crypto.hex(Crypto.sha256(cert + [0] + (key ?? [])))
    }

    public static func == (a: Self, b: Self) -> Bool { a.digest == b.digest }
}
