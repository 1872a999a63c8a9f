/// `type = "server-trust"`: how the TLS certificate of matched upstreams is verified.
public struct ServerTrustSettings: Sendable, Hashable {
    /// Extra CA bundle (PEM) trusted for matched hosts, in addition to the system CAs.
    public var caFile: String?
    /// `sha256//<base64>` of the upstream's public key; the pin replaces chain verification (self-signed
    /// servers), the host name is still checked.
    public var pinnedPublicKey: String?
    /// No verification at all (logged as a warning at start).
    public var insecure: Bool
    /// The contents of `caFile` as the configuration was loaded, given to libcurl as they are (not the path,
    /// which it would read again, and by which it matches cached connections).
    public var caBundle: [UInt8]? = nil
    /// SHA-256 of ``caBundle``: pooled connections are kept apart by it, so a reload that changes only the
    /// bundle's contents (a compromised CA removed) never reuses a connection verified with the old one.
    public var caDigest: String? = nil

    public init(caFile: String?, pinnedPublicKey: String?, insecure: Bool, caBundle: [UInt8]? = nil) {
        self.caFile = caFile
        self.pinnedPublicKey = pinnedPublicKey
        self.insecure = insecure
        self.caBundle = caBundle
        caDigest = caBundle.map { Crypto.hex(Crypto.sha256($0)) }
    }

    // The digest stands for the contents: hashing a whole bundle per pooled request would cost more than the
    // request.
    public static func == (a: Self, b: Self) -> Bool {
        a.caFile == b.caFile && a.caDigest == b.caDigest && a.pinnedPublicKey == b.pinnedPublicKey
            && a.insecure == b.insecure
    }

    public func hash(into h: inout Hasher) {
        h.combine(caFile)
        h.combine(caDigest)
        h.combine(pinnedPublicKey)
        h.combine(insecure)
    }
}
