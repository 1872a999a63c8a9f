/// What a capture keeps of a value the proxy knows to be secret, decided from what the value *is* (a header or
/// field the proxy injected, a field a token protocol defines as secret, a token the proxy holds) rather than by
/// searching the finished file for things that look like secrets. Pure functions over strings and bytes.
enum CaptureRedaction {
    /// Written where the client sent a secret of its own (its `Authorization`, a cookie).
    static let redacted = "[redacted]"

    /// Written where the proxy put a credential's secret (a token, key, signature): the support reader sees which
    /// credential applied without its value.
    static func marker(credential: String) -> String { "[redacted:credential \(credential)]" }

    /// Header fields whose value is a secret whoever set it.
    static let secretHeaders: Set<String> = [
        "authorization", "proxy-authorization", "cookie", "set-cookie", "x-esri-authorization", "x-api-key",
        "x-amz-security-token", "x-goog-iap-jwt-assertion", "x-ms-client-secret",
    ]

    /// Query, form and JSON field names that carry a secret in the protocols the proxy speaks (ArcGIS
    /// `generateToken`, OAuth 2 grants and answers, API keys, SAS and SigV4 query signatures). Compared lowercased.
    static let secretNames: Set<String> = [
        "token", "access_token", "refresh_token", "id_token", "password", "client_secret", "client_assertion",
        "assertion", "code", "code_verifier", "subject_token", "actor_token", "key", "apikey", "api_key", "authkey",
        "secret", "sig", "signature", "x-amz-signature", "x-amz-credential", "x-amz-security-token", "se", "sv",
        "skoid", "sktid", "ske", "sks", "skv", "skt", "session_token", "sessiontoken", "secretaccesskey",
        "accesskeyid",
    ]

    /// Fields of a token-service request kept as sent: what says *which* grant and service, never a secret. Every
    /// other field of the proxy's own token requests is replaced.
    static let tokenServiceFields: Set<String> = [
        "f", "client", "expiration", "referer", "ip", "grant_type", "scope", "username", "client_id",
        "redirect_uri", "resource", "audience", "serverurl", "request", "response_type", "requested_token_type",
        "subject_token_type", "client_assertion_type",
    ]

    /// Fields the proxy sets on every request it forwards that say nothing secret: kept although the client did not
    /// send them.
    static let harmlessProxyHeaders: Set<String> = [
        "via", "content-length", "content-type", "accept-encoding", "host", "transfer-encoding", "connection",
        "user-agent", "accept",
    ]

    // MARK: - headers

    /// The client's fields as sent, its own secrets (`Authorization`, `Proxy-Authorization`, cookies) replaced.
    static func clientHeaders(_ fields: [(name: String, value: String)]) -> [HAR.NameValue] {
        fields.map { f in
            HAR.NameValue(name: f.name, value: secretHeaders.contains(f.name.lowercased()) ? redacted : f.value)
        }
    }

    /// The fields that went upstream. A field the client did not send with this value was set by the proxy: it is
    /// the credential's (a token header, a signature) unless it is one of ``harmlessProxyHeaders``. A secret
    /// header the client did send (passed through) is replaced too.
    static func upstreamHeaders(
        _ fields: [(name: String, value: String)], client: [(name: String, value: String)], credential: String
    ) -> [HAR.NameValue] {
        fields.map { f in
            let lower = f.name.lowercased()
            let fromClient = client.contains { $0.name.lowercased() == lower && $0.value == f.value }
            let value: String
            if fromClient {
                value = secretHeaders.contains(lower) ? redacted : f.value
            } else if secretHeaders.contains(lower) || !harmlessProxyHeaders.contains(lower) {
                value = marker(credential: credential)
            } else {
                value = f.value
            }
            return HAR.NameValue(name: f.name, value: value)
        }
    }

    /// A response's fields: cookies replaced, and every secret the proxy put on the request replaced wherever it
    /// is echoed (a redirect's `Location`).
    static func responseHeaders(
        _ fields: [(name: String, value: String)], secrets: [String], credential: String?
    ) -> [HAR.NameValue] {
        fields.map { f in
            let lower = f.name.lowercased()
            if secretHeaders.contains(lower) { return HAR.NameValue(name: f.name, value: redacted) }
            return HAR.NameValue(
                name: f.name, value: replacingKnown(f.value, secrets: secrets, credential: credential ?? "-"))
        }
    }

    /// The cookies of `Cookie` (request) or `Set-Cookie` (response) fields: names kept, values replaced.
    static func cookies(_ fields: [(name: String, value: String)], response: Bool) -> [HAR.NameValue] {
        var out: [HAR.NameValue] = []
        for f in fields {
            let lower = f.name.lowercased()
            if response, lower == "set-cookie" {
                let pair = f.value.prefix { $0 != ";" }
                if let eq = pair.firstIndex(of: "=") {
                    out.append(
                        HAR.NameValue(name: String(pair[..<eq].trimmingHTTPWhitespace()), value: redacted))
                }
            } else if !response, lower == "cookie" {
                for pair in f.value.split(separator: ";") {
                    guard let eq = pair.firstIndex(of: "=") else { continue }
                    out.append(HAR.NameValue(name: String(pair[..<eq].trimmingHTTPWhitespace()), value: redacted))
                }
            }
        }
        return out
    }

    // MARK: - query strings and forms

    /// The `name=value` pairs of a query string or urlencoded form, raw (still percent-encoded).
    static func rawPairs(_ s: Substring) -> [(name: Substring, value: Substring?)] {
        s.split(separator: "&", omittingEmptySubsequences: true).map { p in
            guard let eq = p.firstIndex(of: "=") else { return (p, nil) }
            return (p[..<eq], p[p.index(after: eq)...])
        }
    }

    /// `s` percent-decoded (`+` as a space, as in forms).
    static func decoded(_ s: Substring) -> String {
        let bytes = Array(s.utf8).map { $0 == UInt8(ascii: "+") ? UInt8(ascii: " ") : $0 }
        return String(decoding: TokenInjection.percentDecoded(bytes), as: UTF8.self)
    }

    /// Which pairs of `sent` to replace, and by what. `client`: the client's raw pairs, when the sent pairs are the
    /// client's with the proxy's additions; a pair the client did not send is the credential's. `keep`: for the
    /// proxy's own requests, the names kept as sent (every other value is replaced).
    static func redactedPairs(
        _ sent: Substring, client: Substring?, credential: String?, keep: Set<String>? = nil
    ) -> (raw: String, list: [HAR.NameValue]) {
        let clientPairs = client.map { rawPairs($0).map { "\($0.name)=\($0.value ?? "")" } } ?? []
        var raw: [String] = []
        var list: [HAR.NameValue] = []
        for (name, value) in rawPairs(sent) {
            let plainName = decoded(name)
            let lower = plainName.lowercased()
            let joined = "\(name)=\(value ?? "")"
            var replacement: String? = nil
            if let keep {
                if !keep.contains(lower) { replacement = credential.map { marker(credential: $0) } ?? redacted }
            } else if client != nil, !clientPairs.contains(joined) {
                replacement = marker(credential: credential ?? "-")
            } else if secretNames.contains(lower) {
                replacement = redacted
            }
            if let replacement {
                raw.append(value == nil ? String(name) : "\(name)=\(TokenInjection.percentEncoded(replacement))")
                list.append(HAR.NameValue(name: plainName, value: replacement))
            } else {
                raw.append(joined)
                list.append(HAR.NameValue(name: plainName, value: value.map { decoded($0) } ?? ""))
            }
        }
        return (raw.joined(separator: "&"), list)
    }

    /// `url` with its query redacted as ``redactedPairs(_:client:credential:keep:)`` says, and the list for HAR's
    /// `queryString`. A fragment never goes on the wire and is not expected here.
    static func redactedURL(_ url: String, clientURL: String?, credential: String?, keep: Set<String>? = nil) -> (
        url: String, query: [HAR.NameValue]
    ) {
        guard let q = url.firstIndex(of: "?") else { return (url, []) }
        let clientQuery = clientURL.map { c -> Substring in
            guard let cq = c.firstIndex(of: "?") else { return "" }
            return c[c.index(after: cq)...]
        }
        let r = redactedPairs(url[url.index(after: q)...], client: clientQuery, credential: credential, keep: keep)
        return (String(url[..<q]) + "?" + r.raw, r.list)
    }

    // MARK: - bodies

    /// `bytes` with every occurrence of each secret (as is, and percent-encoded as a query or form carries it)
    /// replaced by the credential's marker. Longest first, so a secret that contains another is replaced whole.
    static func replacingKnown(_ bytes: [UInt8], secrets: [String], credential: String) -> [UInt8] {
        var out = bytes
        let replacement = Array(marker(credential: credential).utf8)
        var forms: [[UInt8]] = []
        for s in secrets where !s.isEmpty {
            forms.append(Array(s.utf8))
            let encoded = TokenInjection.percentEncoded(s)
            if encoded != s { forms.append(Array(encoded.utf8)) }
        }
        for needle in forms.sorted(by: { $0.count > $1.count }) { out = replacing(needle, with: replacement, in: out) }
        return out
    }

    static func replacingKnown(_ s: String, secrets: [String], credential: String) -> String {
        guard !secrets.isEmpty else { return s }
        return String(decoding: replacingKnown(Array(s.utf8), secrets: secrets, credential: credential), as: UTF8.self)
    }

    private static func replacing(_ needle: [UInt8], with replacement: [UInt8], in haystack: [UInt8]) -> [UInt8] {
        guard !needle.isEmpty, haystack.count >= needle.count else { return haystack }
        var out: [UInt8] = []
        out.reserveCapacity(haystack.count)
        var i = 0
        let first = needle[0]
        while i < haystack.count {
            if haystack[i] == first, i + needle.count <= haystack.count,
                haystack[i..<(i + needle.count)].elementsEqual(needle)
            {
                out.append(contentsOf: replacement)
                i += needle.count
            } else {
                out.append(haystack[i])
                i += 1
            }
        }
        return out
    }
}
