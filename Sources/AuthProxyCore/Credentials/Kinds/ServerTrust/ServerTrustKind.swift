#if canImport(Glibc)
    import Glibc
#endif

/// `server-trust` acts on connections: the TLS verification of matched upstreams (applied by the connection layer,
/// ``NetworkAuth``).
extension ServerTrustSettings: CredentialKind, NetworkKind {
    public static let typeName = "server-trust"
    public var role: CredentialRole { .network(.trust) }
    public var identityMaterial: String { "\(caFile ?? "")\u{0}\(pinnedPublicKey ?? "")\u{0}\(insecure)" }

    func contribute(to network: inout NetworkAuth, credential name: String) {
        network.trust = self
    }

    public static func parse(_ entry: inout TableReader, name: String) throws(ConfigError) -> ServerTrustSettings {
        let caFile = try entry.string("ca_file")
        let pin = try entry.string("pinned_public_key")
        let insecure = try entry.bool("insecure") ?? false
        if let caFile, access(caFile, R_OK) != 0 {
            throw ConfigError(
                key: entry.path + ".ca_file", line: entry.line(of: "ca_file"),
                "cannot read \(entry.shown("ca_file", caFile)): \(lastErrorString())")
        }
        if let pin, !pin.hasPrefix("sha256//") {
            throw ConfigError(
                key: entry.path + ".pinned_public_key", line: entry.line(of: "pinned_public_key"),
                "expected sha256//<base64 of the SHA-256 of the public key>")
        }
        guard [caFile != nil, pin != nil, insecure].filter({ $0 }).count == 1 else {
            throw ConfigError(
                key: entry.path, line: entry.table.line,
                "a server-trust credential needs exactly one of ca_file, pinned_public_key, insecure = true")
        }
        var bundle: [UInt8]? = nil
        if let caFile {
            guard let text = readTextFile(caFile) else {
                throw ConfigError(
                    key: entry.path + ".ca_file", line: entry.line(of: "ca_file"),
                    "cannot read \(entry.shown("ca_file", caFile)): \(lastErrorString())")
            }
            bundle = Array(text.utf8)
        }
        return
            ServerTrustSettings(caFile: caFile, pinnedPublicKey: pin, insecure: insecure, caBundle: bundle)
    }
}

extension CredentialKind where Self == ServerTrustSettings {
    static func serverTrust(_ s: ServerTrustSettings) -> ServerTrustSettings { s }
}
