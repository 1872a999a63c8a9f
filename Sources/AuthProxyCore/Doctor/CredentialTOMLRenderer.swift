/// Renders ``CredentialSuggestion``s as `[[credential]]` TOML that `authproxy check` reads: values as TOML
/// basic strings with every character that needs it escaped, alternatives as comments, and comments that can
/// never break out of their line.
enum CredentialTOMLRenderer {
    /// The document: `header` comment lines, then each block, separated by blank lines.
    static func render(_ suggestions: [CredentialSuggestion], header: [String]) -> String {
        var out = header.map(comment).joined()
        for s in suggestions {
            if !out.isEmpty { out += "\n" }
            out += block(s)
        }
        return out
    }

    static func block(_ s: CredentialSuggestion) -> String {
        var rows: [(key: String, value: String, comment: String?, commentedOut: Bool)] = [
            ("name", quoted(s.name), nil, false),
            ("type", quoted(s.type), nil, false),
            ("match", s.match.count == 1 ? quoted(s.match[0]) : value(.strings(s.match)), nil, false),
        ]
        for f in s.fields { rows.append((f.key, value(f.value), f.comment, f.commentedOut)) }
        let width = rows.map { $0.key.count + ($0.commentedOut ? 2 : 0) }.max() ?? 0
        let prefix = s.isAlternative ? "# " : ""
        var out = s.reasons.map(comment).joined()
        out += prefix + "[[credential]]\n"
        for r in rows {
            let key = (r.commentedOut ? "# " : "") + r.key
            var line = prefix + key + String(repeating: " ", count: width - key.count) + " = " + r.value
            if let c = r.comment { line += "  # " + singleLine(c) }
            out += line + "\n"
        }
        return out
    }

    static func value(_ v: CredentialSuggestion.Value) -> String {
        switch v {
        case .string(let s): return quoted(s)
        case .bool(let b): return b ? "true" : "false"
        case .strings(let a): return "[" + a.map(quoted).joined(separator: ", ") + "]"
        }
    }

    /// A TOML basic string: `"` and `\` escaped, control characters as `\b \t \n \f \r` or `\uXXXX`.
    static func quoted(_ s: String) -> String {
        var out = "\""
        for u in s.unicodeScalars {
            switch u {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\u{08}": out += "\\b"
            case "\t": out += "\\t"
            case "\n": out += "\\n"
            case "\u{0C}": out += "\\f"
            case "\r": out += "\\r"
            default:
                if u.value < 0x20 || u.value == 0x7F {
                    let hex = String(u.value, radix: 16, uppercase: true)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(u)
                }
            }
        }
        return out + "\""
    }

    /// A `# …` line; an empty text gives a bare `#`.
    static func comment(_ text: String) -> String {
        let t = singleLine(text)
        return t.isEmpty ? "#\n" : "# " + t + "\n"
    }

    /// Line breaks and other control characters become spaces: a comment must end at its own line.
    static func singleLine(_ s: String) -> String {
        String(String.UnicodeScalarView(s.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? " " : $0 }))
    }
}
