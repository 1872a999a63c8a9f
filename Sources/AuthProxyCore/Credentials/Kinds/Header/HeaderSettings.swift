/// `type = "header"`: static header fields set on matched requests (an API gateway's key, an identity-aware proxy's
/// service token), replacing the client's fields of the same names. Values may be `${ENV}` or `file:`.
public struct HeaderSettings: Sendable, Equatable {
    public var fields: [HeaderField]

    public init(fields: [HeaderField]) { self.fields = fields }
}

extension HeaderSettings: CredentialKind {
    public static let typeName = "header"
    public static var sharedKeys: SharedCredentialKeys { [.gatewayLayer] }
    public var role: CredentialRole { .token }
    public var identityMaterial: String { fields.map { "\($0.name)\u{0}\($0.value)" }.joined(separator: "\u{0}") }
    public var occupies: [String] { fields.map { $0.name.lowercased() } }

    /// `headers = { "Name" = "value", … }`: at least one field; names are header field names the proxy does not
    /// manage itself; values (secrets, never quoted) may be `${ENV}` or `file:`.
    public static func parse(_ entry: inout TableReader, name: String) throws(ConfigError) -> HeaderSettings {
        guard var t = try entry.table("headers"), !t.table.entries.isEmpty else {
            throw entry.missing(
                "headers", "credential '\(name)' of type header needs headers = { \"X-API-Key\" = \"…\" }")
        }
        var fields: [HeaderField] = []
        var seen = Set<String>()
        for (k, _) in t.table.entries {
            if let why = HeaderField.problem(name: k) {
                throw ConfigError(key: t.path + "." + k, line: t.line(of: k), "'\(k)' \(why)")
            }
            guard seen.insert(k.lowercased()).inserted else {
                throw ConfigError(key: t.path + "." + k, line: t.line(of: k), "'\(k)' is set twice")
            }
            guard let v = try t.string(k), !v.isEmpty else {
                throw ConfigError(key: t.path + "." + k, line: t.line(of: k), "needs a value")
            }
            // The rule every head the proxy writes upstream passes (``OutboundHead``): refused here, at load,
            // rather than as a 502 on every request.
            if let why = OutboundHead.fieldProblem(name: k, value: v) {
                throw ConfigError(key: t.path + "." + k, line: t.line(of: k), "the value (a secret, not shown) \(why)")
            }
            fields.append(HeaderField(name: k, value: v))
        }
        try t.finish()
        return HeaderSettings(fields: fields)
    }

    /// Static fields go on every matched request (no ArcGIS API gate: a gateway guards every path), replacing the
    /// client's.
    public func apply(_ token: IssuedToken?, to request: inout OutgoingRequest) -> ApplyFailure? {
        for f in fields { request.fields.setInjected(name: f.name, value: f.value) }
        return nil
    }

    public func secrets(token: IssuedToken?) -> [String] { fields.map(\.value) }
    public var statusDetails: [(String, String)] { [("fields", fields.map(\.name).joined(separator: ", "))] }
}

extension CredentialKind where Self == HeaderSettings {
    static func header(_ fields: [HeaderField]) -> HeaderSettings { HeaderSettings(fields: fields) }
}
