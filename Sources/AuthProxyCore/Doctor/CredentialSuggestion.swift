/// One `[[credential]]` block that `authproxy doctor` proposes, before rendering (``CredentialTOMLRenderer``).
///
/// Values the operator must supply are obvious placeholders: ``placeholder`` for names and paths, and for
/// secrets an environment reference (`"${AUTHPROXY_…_PASSWORD}"`), which `authproxy check` and `serve` resolve
/// (and refuse while it is not set), so a filled-in block never holds a secret in clear.
struct CredentialSuggestion: Sendable, Equatable {
    /// The placeholder for non-secret values (user names, file paths, client ids).
    static let placeholder = "REPLACE_ME"

    enum Value: Sendable, Equatable {
        case string(String)
        case bool(Bool)
        case strings([String])
    }

    struct Field: Sendable, Equatable {
        var key: String
        var value: Value
        /// Said after the value (`# …`).
        var comment: String?
        /// An alternative the operator may switch to: rendered as a comment.
        var commentedOut = false

        init(_ key: String, _ value: Value, comment: String? = nil, commentedOut: Bool = false) {
            self.key = key
            self.value = value
            self.comment = comment
            self.commentedOut = commentedOut
        }
    }

    var type: String
    var name: String
    var match: [String]
    /// Comment lines above the block: why it is proposed.
    var reasons: [String]
    /// The keys after `name`, `type` and `match`.
    var fields: [Field]
    /// A whole alternative to another block (e.g. `oauth-app` instead of `arcgis-token`): rendered commented
    /// out, so the document stays valid with one token credential per match.
    var isAlternative = false

    /// The environment variables its secrets are read from (active fields only), in order.
    var environmentVariables: [String] {
        fields.compactMap { f -> String? in
            guard !f.commentedOut, case .string(let s) = f.value, s.hasPrefix("${"), s.hasSuffix("}") else {
                return nil
            }
            return String(s.dropFirst(2).dropLast())
        }
    }

    /// `"${AUTHPROXY_<HOST>_<WHAT>}"`: an environment reference named after the host and the secret, valid as a
    /// shell variable name (`127.0.0.1` becomes `127_0_0_1` behind the `AUTHPROXY_` prefix).
    static func secretReference(host: String, _ what: String) -> String {
        var name = "AUTHPROXY_"
        for c in (host + "_" + what).uppercased() {
            let ok = c.isASCII && (c.isLetter || c.isNumber)
            if ok { name.append(c) } else if name.last != "_" { name.append("_") }
        }
        return "${" + name + "}"
    }

    /// A credential name from a host and a type: `gis.example.com` + `arcgis-token` → `gis-example-com-arcgis-token`.
    static func name(host: String, type: String) -> String {
        var s = ""
        for c in host.lowercased() {
            if c.isASCII && (c.isLetter || c.isNumber) {
                s.append(c)
            } else if !s.isEmpty, s.last != "-" {
                s.append("-")
            }
        }
        while s.hasSuffix("-") { s.removeLast() }
        return (s.isEmpty ? "service" : s) + "-" + type
    }
}
