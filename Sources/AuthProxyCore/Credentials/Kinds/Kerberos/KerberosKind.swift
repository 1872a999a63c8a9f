#if canImport(Glibc)
    import Glibc
#endif

/// `kerberos` acts on connections: Negotiate with a ticket the proxy obtains itself (``KerberosTickets``).
extension KerberosSettings: CredentialKind, NetworkKind {
    public static let typeName = "kerberos"
    public var role: CredentialRole { .network(.kerberos) }
    public var identityMaterial: String { "\(principal)\u{0}\(keytab ?? "")\u{0}\(password ?? "")" }

    func contribute(to network: inout NetworkAuth, credential name: String) {
        network.kerberos = self
    }

    public static func parse(_ entry: inout TableReader, name: String) throws(ConfigError) -> KerberosSettings {
        let principal = try entry.required("principal", credential: name, type: typeName)
        let keytab = try entry.string("keytab")
        let password = try entry.string("password")
        guard (keytab == nil) != (password == nil) else {
            throw ConfigError(
                key: entry.path, line: entry.table.line,
                "a kerberos credential needs exactly one of keytab or password")
        }
        if let keytab, access(keytab, R_OK) != 0 {
            throw ConfigError(
                key: entry.path + ".keytab", line: entry.line(of: "keytab"),
                "cannot read \(entry.shown("keytab", keytab)): \(lastErrorString())")
        }
        return KerberosSettings(principal: principal, keytab: keytab, password: password)
    }
}

extension CredentialKind where Self == KerberosSettings {
    static func kerberos(_ s: KerberosSettings) -> KerberosSettings { s }
}
