/// Which authentication scheme answers an upstream's 401 challenge, for metrics and the status page: the most
/// secure scheme the server offers that the exchange's network credential can use, in libcurl's order of
/// preference (Negotiate, NTLM, Digest, Basic).
enum NetworkAuthScheme {
    /// The schemes named in `WWW-Authenticate` values (lower case): each comma-separated challenge starts with
    /// its scheme token; auth-params (`realm="x"`, `qop=auth`) and token68 continuations are skipped.
    static func offered(_ values: [String]) -> [String] {
        var out: [String] = []
        for v in values {
            for piece in splitOutsideQuotes(v) {
                let trimmed = piece.drop { $0 == " " || $0 == "\t" }
                guard let first = trimmed.split(whereSeparator: { $0 == " " || $0 == "\t" }).first, !first.contains("=")
                else { continue }
                let scheme = first.lowercased()
                if !out.contains(scheme) { out.append(scheme) }
            }
        }
        return out
    }

    /// `value` split at commas that are not inside a quoted string (`nonce="a,b"` stays whole).
    static func splitOutsideQuotes(_ value: String) -> [Substring] {
        var pieces: [Substring] = []
        var start = value.startIndex
        var quoted = false
        var escaped = false
        for i in value.indices {
            let ch = value[i]
            if escaped {
                escaped = false
            } else if quoted && ch == "\\" {
                escaped = true
            } else if ch == "\"" {
                quoted.toggle()
            } else if ch == ",", !quoted {
                pieces.append(value[start..<i])
                start = value.index(after: i)
            }
        }
        pieces.append(value[start...])
        return pieces
    }

    /// The scheme the credential answers `offered` with, or nil when it cannot answer any.
    static func answered(offered values: [String], auth: NetworkAuth) -> String? {
        let schemes = offered(values)
        if auth.kerberos != nil, schemes.contains("negotiate") { return "negotiate" }
        guard let p = auth.password else { return nil }
        for s in [PasswordScheme.ntlm, .digest, .basic] where p.schemes.contains(s) && schemes.contains(s.rawValue) {
            return s.rawValue
        }
        return nil
    }
}
