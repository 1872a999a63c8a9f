/// How a token goes into a request: pure functions over the request's URL, headers and (small, buffered)
/// urlencoded form body. A request never carries two tokens: injecting removes any token the client sent.
public enum TokenInjection {
    /// Whether the client already sent a token of its own: a non-empty `token` query parameter (or form field,
    /// when the form is given), `X-Esri-Authorization` with a value, or `Authorization: Bearer <token>`.
    ///
    /// An empty value is no token: the REST Services Directory's forms submit `token=` with every query, and
    /// `X-Esri-Authorization: Bearer ` with nothing after it carries nothing either. Such a request gets the
    /// proxy's token, and ``apply(token:site:pathAndQuery:headers:form:)`` removes the empty one first.
    public static func clientHasToken(pathAndQuery: String, headers: HTTPHeaders, form: [UInt8]? = nil) -> Bool {
        for v in headers.values("x-esri-authorization") {
            switch headerCredential(v) {
            case .bearerToken, .other: return true
            case .none, .emptyBearer: break
            }
        }
        if headers.values("authorization").contains(where: { headerCredential($0) == .bearerToken }) { return true }
        if queryHasTokenValue(pathAndQuery) { return true }
        if let form, hasTokenValue(form) { return true }
        return false
    }

    /// What an `Authorization` or `X-Esri-Authorization` value holds.
    public enum HeaderCredential: Equatable, Sendable {
        /// Nothing at all.
        case none
        /// `Bearer` and nothing after it.
        case emptyBearer
        /// `Bearer <token>`.
        case bearerToken
        /// Another scheme (`Basic …`, `NTLM …`), or a bare value.
        case other
    }

    public static func headerCredential(_ value: String) -> HeaderCredential {
        let (scheme, credentials) = value.authorizationScheme()
        if scheme.isEmpty { return .none }
        guard scheme.caseInsensitiveEquals("bearer") else { return .other }  // `Bearerish` too: not the scheme
        return credentials.isEmpty ? .emptyBearer : .bearerToken
    }

    /// Whether the request body is an urlencoded form (the one body a token can go into).
    public static func isForm(_ headers: HTTPHeaders) -> Bool {
        headers.first("content-type")?.lowercased().hasPrefix("application/x-www-form-urlencoded") == true
    }

    public enum Site: Equatable, Sendable {
        case query
        case form
        case header
    }

    /// Where the token goes for this request.
    public static func site(placement: TokenPlacement, method: String, isForm: Bool) -> Site {
        if placement == .header { return .header }
        switch method {
        case "GET", "HEAD", "DELETE": return .query
        default: return isForm ? .form : .query
        }
    }

    /// The request with `token` applied at `site`; every client token is removed first.
    public static func apply(
        token: String, site: Site, pathAndQuery: String, headers: HTTPHeaders, form: [UInt8]?
    ) -> (pathAndQuery: String, headers: HTTPHeaders, form: [UInt8]?) {
        var h = headers
        h.remove(name: "x-esri-authorization")
        let bearer = h.values("authorization").contains {
            let c = headerCredential($0)
            return c == .bearerToken || c == .emptyBearer
        }
        if bearer { h.remove(name: "authorization") }
        var path = removingTokenField(fromURL: pathAndQuery)
        var body = form.map(removingTokenField)
        switch site {
        case .header:
            h.setInjected(name: "X-Esri-Authorization", value: "Bearer \(token)")
        case .query:
            path +=
                (path.utf8.contains(UInt8(ascii: "?")) ? (path.hasSuffix("?") || path.hasSuffix("&") ? "" : "&") : "?")
            path += "token=" + percentEncoded(token)
        case .form:
            var b = body ?? []
            if !b.isEmpty, b.last != UInt8(ascii: "&") { b.append(UInt8(ascii: "&")) }
            b.append(contentsOf: Array(("token=" + percentEncoded(token)).utf8))
            body = b
        }
        return (path, h, body)
    }

    /// Whether an `a=1&b=2` sequence has a `token` field.
    static func hasTokenField(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { hasField($0, tokenName) }
    }

    /// Whether an `a=1&b=2` sequence has a `token` field with a value (`token=` alone is no token).
    static func hasTokenValue(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { hasField($0, tokenName, nonEmpty: true) }
    }

    /// Whether an `a=1&b=2` sequence has a field whose decoded name is `lowercased` (scanned in place: this runs
    /// for every request with a query).
    static func hasField(_ bytes: UnsafeRawBufferPointer, _ lowercased: [UInt8], nonEmpty: Bool = false) -> Bool {
        var found = false
        forEachField(bytes) { field in
            if fieldNameIs(field, lowercased), !nonEmpty || fieldHasValue(field) { found = true }
            return !found
        }
        return found
    }

    /// Calls `body` with each non-empty `&`-separated field until it returns false.
    private static func forEachField(_ bytes: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) -> Bool) {
        var start = 0
        while start < bytes.count {
            var end = start
            while end < bytes.count, bytes[end] != UInt8(ascii: "&") { end += 1 }
            if end > start, !body(UnsafeRawBufferPointer(rebasing: bytes[start..<end])) { return }
            start = end + 1
        }
    }

    /// Whether the query of `pathAndQuery` has a `token` field.
    static func queryHasTokenField(_ pathAndQuery: String) -> Bool {
        queryHasField(pathAndQuery, tokenName)
    }

    /// Whether the query of `pathAndQuery` has a `token` field with a value.
    static func queryHasTokenValue(_ pathAndQuery: String) -> Bool {
        queryHasField(pathAndQuery, tokenName, nonEmpty: true)
    }

    /// Whether a `name=value` field has a non-empty value.
    static func fieldHasValue(_ field: UnsafeRawBufferPointer) -> Bool {
        guard let eq = field.firstIndex(of: UInt8(ascii: "=")) else { return false }
        return eq + 1 < field.count
    }

    private static let tokenName = Array("token".utf8)

    /// Whether a `name=value` field's decoded name equals `lowercased` (ASCII), ignoring ASCII case; `%74oken` is
    /// `token` to the server.
    static func fieldNameIs(_ field: UnsafeRawBufferPointer, _ lowercased: [UInt8]) -> Bool {
        var n = 0
        var plain = true
        while n < field.count, field[n] != UInt8(ascii: "=") {
            if field[n] == UInt8(ascii: "%") || field[n] == UInt8(ascii: "+") { plain = false }
            n += 1
        }
        let raw = UnsafeRawBufferPointer(rebasing: field[..<n])
        // Most names need no decoding: compare the bytes as they are, without allocating.
        if plain { return asciiCaseInsensitiveEquals(raw, lowercased: lowercased) }
        return percentDecoded(raw).withUnsafeBytes { asciiCaseInsensitiveEquals($0, lowercased: lowercased) }
    }

    /// `%XX` and `+` decoding of a query or form component (invalid escapes are kept as they are).
    static func percentDecoded(_ bytes: some Collection<UInt8>) -> [UInt8] {
        let u = Array(bytes)
        guard u.contains(UInt8(ascii: "%")) || u.contains(UInt8(ascii: "+")) else { return u }
        var out: [UInt8] = []
        out.reserveCapacity(u.count)
        var i = 0
        while i < u.count {
            if u[i] == UInt8(ascii: "%"), i + 2 < u.count, let h = hexDigitValue(u[i + 1]),
                let l = hexDigitValue(u[i + 2])
            {
                out.append(h << 4 | l)
                i += 3
            } else {
                out.append(u[i] == UInt8(ascii: "+") ? 32 : u[i])
                i += 1
            }
        }
        return out
    }

    /// Whether the query of `pathAndQuery` has a field whose decoded name is `name`.
    public static func queryHasField(_ pathAndQuery: String, _ name: String) -> Bool {
        queryHasField(pathAndQuery, Array(name.lowercased().utf8))
    }

    private static func queryHasField(_ pathAndQuery: String, _ lowercased: [UInt8], nonEmpty: Bool = false) -> Bool {
        var s = pathAndQuery
        return s.withUTF8 { u in
            guard let q = u.firstIndex(of: UInt8(ascii: "?")) else { return false }
            return hasField(
                UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: u[(q + 1)...])), lowercased, nonEmpty: nonEmpty)
        }
    }

    static func removingTokenField(_ bytes: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        bytes.withUnsafeBytes { b in
            forEachField(b) { field in
                if !fieldNameIs(field, tokenName) {
                    if !out.isEmpty { out.append(UInt8(ascii: "&")) }
                    out.append(contentsOf: field)
                }
                return true
            }
        }
        return out
    }

    static func removingTokenField(fromURL pathAndQuery: String) -> String {
        // The common case: nothing to remove, nothing to copy.
        guard queryHasTokenField(pathAndQuery), let q = pathAndQuery.utf8.firstIndex(of: UInt8(ascii: "?")) else {
            return pathAndQuery
        }
        let path = pathAndQuery[..<q]
        let rest = removingTokenField(Array(pathAndQuery[pathAndQuery.index(after: q)...].utf8))
        return rest.isEmpty ? String(path) : String(path) + "?" + String(decoding: rest, as: UTF8.self)
    }

    /// Percent-encodes everything but RFC 3986 unreserved characters.
    public static func percentEncoded(_ s: String) -> String {
        if s.utf8.allSatisfy(isUnreservedURIByte) { return s }
        var out = ""
        out.reserveCapacity(s.utf8.count)
        for b in s.utf8 {
            if isUnreservedURIByte(b) {
                out.unicodeScalars.append(Unicode.Scalar(b))
            } else {
                let hex = String(b, radix: 16, uppercase: true)
                out += "%" + (hex.count == 1 ? "0" : "") + hex
            }
        }
        return out
    }

    /// `application/x-www-form-urlencoded` encoding of a field list (for token-service requests).
    public static func formEncoded(_ fields: [(String, String)]) -> String {
        fields.map { "\(percentEncoded($0.0))=\(percentEncoded($0.1))" }.joined(separator: "&")
    }
}
