/// `type = "certificate"`: a client certificate for mutual TLS.
public struct ClientCertificateSettings: Sendable, Equatable {
    /// PKCS#12 (.p12/.pfx) file, with `password`.
    public var file: String?
    public var password: String?
    /// Or PEM certificate and key, with an optional key password.
    public var cert: String?
    public var key: String?
    public var keyPassword: String?
    /// The files' contents as last loaded and checked (at start, by a reload, or when a renewed file was
    /// adopted): what connections are made with. Compared by digest, so pooled connections made with another
    /// certificate are kept apart.
    public var material: ClientCertificateMaterial? = nil
}
