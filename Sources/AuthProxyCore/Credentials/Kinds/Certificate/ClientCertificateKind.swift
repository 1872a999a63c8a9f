#if canImport(Glibc)
    import Glibc
#endif

/// `certificate` acts on connections: a client certificate for mutual TLS, loaded and checked as libcurl blobs
/// (``ClientCertificateMaterial``) and renewed when its files change (``CertificateRenewal``).
extension ClientCertificateSettings: CredentialKind, NetworkKind {
    public static let typeName = "certificate"
    public var role: CredentialRole { .network(.certificate) }
    public var identityMaterial: String { "\(file ?? "")\u{0}\(cert ?? "")\u{0}\(key ?? "")" }

    func contribute(to network: inout NetworkAuth, credential name: String) {
        network.certificate = self
        network.certificateName = name
    }

    public static func parse(_ entry: inout TableReader, name: String) throws(ConfigError) -> ClientCertificateSettings
    {
        var s = ClientCertificateSettings(
            file: try entry.string("file"), password: try entry.string("password"),
            cert: try entry.string("cert"), key: try entry.string("key"),
            keyPassword: try entry.string("key_password"))
        guard (s.file != nil) != (s.cert != nil || s.key != nil) else {
            throw ConfigError(
                key: entry.path, line: entry.table.line,
                "a certificate credential needs file (+ password) for PKCS#12, or cert + key (+ key_password) for PEM"
            )
        }
        switch ClientCertificateCheck.load(s) {
        case .success(let m): s.material = m
        case .failure(let failure):
            var problem = failure.message
            // The check quotes the paths it could not use: not those read from a file or the environment.
            for (k, v) in [("file", s.file), ("cert", s.cert), ("key", s.key)] where entry.isReference(k) {
                if let v, !v.isEmpty { problem = problem.replacing("'\(v)'", with: entry.shown(k, v)) }
            }
            throw ConfigError(
                key: entry.path + (s.file != nil ? ".file" : ".cert"),
                line: entry.line(of: s.file != nil ? "file" : "cert"), problem)
        }
        return s
    }
}

extension ClientCertificateSettings {
    public func expiries(credential: String) -> [CredentialExpiry] {
        material?.notAfter.map { [CredentialExpiry(credential: credential, what: .certificate, expires: $0)] } ?? []
    }
}

extension CredentialKind where Self == ClientCertificateSettings {
    static func certificate(_ s: ClientCertificateSettings) -> ClientCertificateSettings { s }
}
