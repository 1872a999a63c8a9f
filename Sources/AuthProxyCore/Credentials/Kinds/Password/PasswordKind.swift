#if canImport(Glibc)
    import Glibc
#endif

/// `password` acts on connections: the upstream's 401 is answered with Basic, Digest or NTLM (``NetworkAuth``): NTLM by
/// libcurl, Basic and Digest by whichever client carries the request (``UpstreamClient``).
extension PasswordSettings: CredentialKind, NetworkKind {
    public static let typeName = "password"
    public var role: CredentialRole { .network(.password) }
    public var identityMaterial: String { "\(username)\u{0}\(password)\u{0}\(domain ?? "")" }

    func contribute(to network: inout NetworkAuth, credential name: String) {
        network.password = self
        network.passwordName = name
    }

    public static func parse(_ entry: inout TableReader, name: String) throws(ConfigError) -> PasswordSettings {
        var schemes = Set(PasswordScheme.allCases)
        if let list = try entry.stringArray("schemes") {
            schemes = []
            for s in list.values {
                guard let scheme = PasswordScheme(rawValue: s.lowercased()) else {
                    throw ConfigError(
                        key: entry.path + ".schemes", line: list.line,
                        "\(entry.shown("schemes", s)) is not one of basic, digest, ntlm")
                }
                schemes.insert(scheme)
            }
            if schemes.isEmpty {
                throw ConfigError(key: entry.path + ".schemes", line: list.line, "needs at least one scheme")
            }
        }
        let domain = try entry.string("domain")
        if domain != nil, entry.table["schemes"] == nil {
            // libcurl sends one user name for every scheme: DOMAIN\user is only right for NTLM.
            schemes = [.ntlm]
        }
        return
            PasswordSettings(
                username: try entry.required("username", credential: name, type: typeName),
                password: try entry.required("password", credential: name, type: typeName),
                domain: domain, schemes: schemes,
                allowBasicOverHTTP: try entry.bool("allow_basic_over_http") ?? false)
    }
}

extension CredentialKind where Self == PasswordSettings {
    static func password(_ s: PasswordSettings) -> PasswordSettings { s }
}
