/// Recognises an ArcGIS "token invalid/expired" (498) or "token required" (499) answer in every form
/// servers use:
/// - HTTP status 498/499;
/// - a JSON body `{"error":{"code":498,…}}` with any spacing (usually with HTTP 200), or with
///   `"messageCode":"GWM_0003"` (token required) without a code or with any code but 403;
/// - the unwrapped shape of ArcGIS Server and older releases, `{"code":499,"message":"Token Required",…}`;
/// - either wrapped in a JSONP callback;
/// - the HTML "Invalid Token" / "Token Required" page of tile endpoints;
/// - any of those sent with `Content-Encoding: gzip` or `deflate` (a bounded decoded copy is read).
/// HTTP 403, or an error object of code 403 (with GWM_0003 or not, as ArcGIS answers a user without
/// permission with HTTP 200), means "no permission": never a token error, as no new token would help.
public enum TokenRejection {
    /// How much of a body is examined at most (encoded, and again decoded).
    public static let lookAhead = 64 * 1024

    /// Whether a response of this content type may carry a token error in its body (and so must be held back
    /// for inspection).
    public static func mayCarryError(contentType: String?) -> Bool {
        guard let ct = contentType else { return true }
        return mayCarryError(contentTypeBytes: Array(ct.utf8))
    }

    /// ``mayCarryError(contentType:)`` for the value as received (bytes, any case): runs for every response
    /// head, so no String is made.
    public static func mayCarryError(contentTypeBytes ct: some Collection<UInt8>) -> Bool {
        asciiHasPrefixIgnoringCase(ct, "text/") || asciiContainsIgnoringCase(ct, "json")
            || asciiContainsIgnoringCase(ct, "javascript") || asciiContainsIgnoringCase(ct, "html")
    }

    /// The `Accept-Encoding` to send upstream on a request whose answer will be inspected for a token error:
    /// the client's codings the sniffer can decode (`gzip`, `x-gzip`, `deflate`, `identity`, with their
    /// weights), so a 498 can never come back in `br` or `zstd` and slip through unrecognised. `*` names any
    /// coding, so it goes too; `identity` is sent when none remain. Nil when nothing needs to change (no
    /// `Accept-Encoding`, or only codings the sniffer reads): the client's field goes as it is.
    public static func acceptEncodingForInspection(_ headers: HTTPHeaders) -> String? {
        // The usual case (`gzip, deflate`, or none) costs one scan and no allocation.
        guard !namesOnlyDecodable(headers) else { return nil }
        var kept: [Substring] = []
        forEachCoding(headers) { entry, name in
            if isDecodable(name) { kept.append(entry) }
            return true
        }
        // What is left must accept something: `br, identity;q=0` would otherwise become `identity;q=0`, which
        // accepts nothing (a 406 from a strict server).
        return kept.contains(where: { !refused($0) }) ? kept.joined(separator: ", ") : "identity"
    }

    /// Whether the `Accept-Encoding` fields name only codings the check reads (or none): then nothing is rewritten.
    static func namesOnlyDecodable(_ headers: HTTPHeaders) -> Bool {
        var only = true
        forEachCoding(headers) { _, name in
            only = isDecodable(name)
            return only
        }
        return only
    }

    /// Each element of the `Accept-Encoding` fields (trimmed) and its coding name, in order, without allocating;
    /// `body` returns false to stop.
    private static func forEachCoding(_ headers: HTTPHeaders, _ body: (_ entry: Substring, _ name: Substring) -> Bool) {
        for f in headers.fields where f.name.caseInsensitiveEquals("accept-encoding") {
            var rest = Substring(f.value)
            while !rest.isEmpty {
                let end = rest.firstIndex(of: ",") ?? rest.endIndex
                let entry = rest[..<end].trimmingHTTPWhitespace()
                rest = end == rest.endIndex ? rest[end...] : rest[rest.index(after: end)...]
                if entry.isEmpty { continue }
                let name = entry[..<(entry.firstIndex(of: ";") ?? entry.endIndex)].trimmingHTTPWhitespace()
                if !body(entry, name) { return }
            }
        }
    }

    /// The content codings ``isRejection(status:contentType:contentEncoding:body:)`` reads.
    private static func isDecodable(_ name: Substring) -> Bool {
        name.caseInsensitiveEquals("gzip") || name.caseInsensitiveEquals("x-gzip")
            || name.caseInsensitiveEquals("deflate") || name.caseInsensitiveEquals("identity")
    }

    /// Whether an `Accept-Encoding` element has `q=0` (RFC 9110 §12.4.2: "not acceptable").
    static func refused(_ entry: Substring) -> Bool {
        for p in entry.split(separator: ";").dropFirst() {
            let kv = p.split(separator: "=", maxSplits: 1).map { $0.trimmingHTTPWhitespace() }
            guard kv.count == 2, kv[0].lowercased() == "q", let q = Double(kv[1]) else { continue }
            return q == 0
        }
        return false
    }

    /// Whether the status alone says so.
    public static func isRejection(status: Int) -> Bool { status == 498 || status == 499 }

    /// Whether `body` (the first bytes of the response, as received: still content-encoded) is a token error.
    public static func isRejection(
        status: Int, contentType: String?, contentEncoding: String? = nil,
        body: some Collection<UInt8>
    ) -> Bool {
        if isRejection(status: status) { return true }
        if status == 403 { return false }
        guard mayCarryError(contentType: contentType) else { return false }
        var bytes = Array(body.prefix(lookAhead))
        if let encoding = BoundedInflate.Encoding(contentEncoding: contentEncoding) {
            guard let decoded = BoundedInflate.decode(bytes, encoding: encoding, limit: lookAhead) else { return false }
            bytes = decoded
        } else if let ce = contentEncoding?.trimmingHTTPWhitespace(), !ce.isEmpty, ce.lowercased() != "identity" {
            return false  // an encoding this cannot read: no guessing on compressed bytes
        }
        if let e = errorObject(bytes), e.isTokenError { return true }
        let ct = contentType?.lowercased() ?? ""
        if ct.contains("html") || bytes.first(where: { !isSpace($0) }) == UInt8(ascii: "<") {
            let text = String(decoding: bytes, as: UTF8.self).lowercased()
            return text.contains("invalid token") || text.contains("token required")
        }
        return false
    }

    /// The fields of an ArcGIS error object that matter here.
    struct ErrorFields: Equatable {
        var code: Int?
        var messageCode: String?

        var isTokenError: Bool { Self.isTokenError(code: code, messageCode: messageCode) }

        /// 498 (invalid/expired) or 499 (required), or `GWM_0003` (token required) unless the code is 403: the
        /// same messageCode comes with 403 for "no permission", which a new token would not change.
        static func isTokenError(code: Int?, messageCode: String?) -> Bool {
            if code == 498 || code == 499 { return true }
            return messageCode == "GWM_0003" && code != 403
        }
    }

    /// The members of a body that *is* an ArcGIS error object (optionally JSONP-wrapped), else nil: either
    /// `{"error":{…}}` (the `error` member first) or an object made only of `code`, `message`,
    /// `messageCode` and `details`. So a feature attribute named `code`, or data that merely also has an
    /// `error` member, never matches.
    static func errorObject(_ b: [UInt8]) -> ErrorFields? {
        var i = 0
        skipSpace(b, &i)
        // JSONP: identifier characters, then '('.
        if i < b.count, b[i] != UInt8(ascii: "{") {
            while i < b.count, isIdentifier(b[i]) { i += 1 }
            skipSpace(b, &i)
            guard i < b.count, b[i] == UInt8(ascii: "(") else { return nil }
            i += 1
            skipSpace(b, &i)
        }
        guard expect(b, &i, "{") else { return nil }
        let start = i
        if expectString(b, &i, "error"), expect(b, &i, ":"), expect(b, &i, "{") {
            return members(b, &i, only: nil)
        }
        i = start
        guard let top = members(b, &i, only: ["code", "message", "messageCode", "details"]),
            top.code != nil || top.messageCode != nil
        else { return nil }
        return top
    }

    /// Walks the members of an object (just after its `{`), collecting `code` and `messageCode`. With `only`,
    /// any other member name means "not an error object". Stops at the object's end or the look-ahead.
    private static func members(_ b: [UInt8], _ i: inout Int, only: Set<String>?) -> ErrorFields? {
        var fields = ErrorFields()
        skipSpace(b, &i)
        if i < b.count, b[i] == UInt8(ascii: "}") { return only == nil ? fields : nil }
        while i < b.count {
            skipSpace(b, &i)
            guard i < b.count, b[i] == UInt8(ascii: "\"") else { return nil }
            let key = readString(b, &i)
            if let only, !only.contains(key) { return nil }
            guard expect(b, &i, ":") else { return nil }
            skipSpace(b, &i)
            switch key {
            case "code":
                var n = 0
                var digits = 0
                while i < b.count, b[i] >= 48, b[i] <= 57, digits < 6 {
                    n = n * 10 + Int(b[i] - 48)
                    digits += 1
                    i += 1
                }
                if digits > 0 { fields.code = n } else { skipValue(b, &i) }
            case "messageCode":
                if i < b.count, b[i] == UInt8(ascii: "\"") {
                    fields.messageCode = readString(b, &i)
                } else {
                    skipValue(b, &i)
                }
            default:
                skipValue(b, &i)
            }
            skipSpace(b, &i)
            guard i < b.count else { break }  // cut at the look-ahead: judge on what was seen
            if b[i] == UInt8(ascii: "}") { break }
            guard b[i] == UInt8(ascii: ",") else { return nil }
            i += 1
        }
        return fields
    }

    /// Skips one JSON value (string, number, literal, or a nested object/array).
    private static func skipValue(_ b: [UInt8], _ i: inout Int) {
        guard i < b.count else { return }
        if b[i] == UInt8(ascii: "\"") {
            _ = readString(b, &i)
            return
        }
        if b[i] == UInt8(ascii: "{") || b[i] == UInt8(ascii: "[") {
            var depth = 0
            while i < b.count {
                switch b[i] {
                case UInt8(ascii: "\""): _ = readString(b, &i); continue
                case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    depth -= 1
                    if depth == 0 { i += 1; return }
                default: break
                }
                i += 1
            }
            return
        }
        while i < b.count, b[i] != UInt8(ascii: ","), b[i] != UInt8(ascii: "}"), !isSpace(b[i]) { i += 1 }
    }

    private static func isSpace(_ c: UInt8) -> Bool { c == 32 || c == 9 || c == 10 || c == 13 }
    private static func isIdentifier(_ c: UInt8) -> Bool {
        (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c == 95 || c == 36 || c == 46
    }
    private static func skipSpace(_ b: [UInt8], _ i: inout Int) { while i < b.count, isSpace(b[i]) { i += 1 } }
    private static func expect(_ b: [UInt8], _ i: inout Int, _ c: Character) -> Bool {
        skipSpace(b, &i)
        guard i < b.count, b[i] == c.asciiValue! else { return false }
        i += 1
        return true
    }
    private static func expectString(_ b: [UInt8], _ i: inout Int, _ s: String) -> Bool {
        skipSpace(b, &i)
        guard i < b.count, b[i] == UInt8(ascii: "\"") else { return false }
        return readString(b, &i) == s
    }
    /// Reads a JSON string starting at the opening quote (escapes kept raw; enough for key comparison).
    private static func readString(_ b: [UInt8], _ i: inout Int) -> String {
        i += 1
        let start = i
        while i < b.count, b[i] != UInt8(ascii: "\"") {
            if b[i] == UInt8(ascii: "\\") { i += 1 }
            i += 1
        }
        let s = String(decoding: b[start..<min(i, b.count)], as: UTF8.self)
        i += 1
        return s
    }
}
