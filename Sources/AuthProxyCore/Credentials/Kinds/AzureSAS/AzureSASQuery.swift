/// A shared access signature as a query string (`se=…&sp=rl&sv=…&sr=c&sig=…`), and how it goes onto a request. Pure.
///
/// The SAS replaces every SAS field the client's URL carries: Azure signs the fields it reads, so one stale `sig`,
/// `se` or `skoid` of a client's own SAS left beside the proxy's would make the whole request fail authentication.
enum AzureSASQuery {
    /// The query fields Azure Storage reads as part of a SAS (service, account and user delegation SAS).
    static let fieldNames: Set<String> = [
        "sv", "ss", "srt", "sp", "se", "st", "spr", "sip", "si", "sr", "sig", "sdd", "ses", "skoid", "sktid", "skt",
        "ske", "sks", "skv", "saoid", "suoid", "scid", "sduoid", "rscc", "rscd", "rsce", "rscl", "rsct",
    ]

    /// The token as it goes into a URL: without the `?` some services put in front.
    static func normalized(_ token: String) -> String {
        token.hasPrefix("?") ? String(token.dropFirst()) : token
    }

    /// Why `token` cannot be appended to a request's query, or nil when it can: `name=value` fields joined by `&`, in
    /// bytes a URL may carry as they are, with a `sig`. Never quotes the token.
    static func problem(_ token: String) -> String? {
        guard !token.isEmpty else { return "it is empty" }
        for (i, b) in token.utf8.enumerated() where !isQueryByte(b) {
            return "it cannot go into a URL (\(TokenSyntax.describe(b)) at byte \(i) of \(token.utf8.count))"
        }
        let fields = token.split(separator: "&", omittingEmptySubsequences: false)
        for f in fields where !f.contains("=") || f.hasPrefix("=") {
            return "it is not name=value fields joined by '&'"
        }
        guard value(of: "sig", in: token).map({ !$0.isEmpty }) == true else { return "it has no sig" }
        return nil
    }

    /// The value of field `name` in `token`, as written (still percent-encoded).
    static func value(of name: String, in token: String) -> Substring? {
        for f in token.split(separator: "&") {
            guard let eq = f.firstIndex(of: "=") else { continue }
            if f[..<eq] == name { return f[f.index(after: eq)...] }
        }
        return nil
    }

    /// The decoded value of field `name` in `token`.
    static func decodedValue(of name: String, in token: String) -> String? {
        value(of: name, in: token).map { String(decoding: TokenInjection.percentDecoded($0.utf8), as: UTF8.self) }
    }

    /// `pathAndQuery` with the SAS appended: every field of the client's query that is a SAS field (``fieldNames``,
    /// or a name the token carries) is dropped first; the rest keep their order and bytes.
    static func merged(pathAndQuery: String, sas: String) -> String {
        guard let q = pathAndQuery.firstIndex(of: "?") else { return pathAndQuery + "?" + sas }
        var replaced = fieldNames
        for f in sas.split(separator: "&") {
            replaced.insert(String(f.prefix { $0 != "=" }).lowercased())
        }
        var kept: [Substring] = []
        for f in pathAndQuery[pathAndQuery.index(after: q)...].split(separator: "&") {
            let name = String(decoding: TokenInjection.percentDecoded(f.prefix { $0 != "=" }.utf8), as: UTF8.self)
            if !replaced.contains(name.lowercased()) { kept.append(f) }
        }
        kept.append(Substring(sas))
        return pathAndQuery[..<q] + "?" + kept.joined(separator: "&")
    }

    /// The values that must never reach a client: the whole token and its signature, as written and decoded (the
    /// other fields — expiry, permissions, key ids — grant nothing without it).
    static func secrets(of token: String) -> [String] {
        var out = [token]
        if let sig = value(of: "sig", in: token), !sig.isEmpty {
            out.append(String(sig))
            if let decoded = decodedValue(of: "sig", in: token), decoded != String(sig) { out.append(decoded) }
        }
        return out
    }

    /// RFC 3986 query characters: unreserved, sub-delims, `:`, `@`, `/`, `?`, and `%` of an escape.
    private static func isQueryByte(_ b: UInt8) -> Bool {
        switch b {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return "-._~!$&'()*+,;=:@/?%".utf8.contains(b)
        }
    }
}
