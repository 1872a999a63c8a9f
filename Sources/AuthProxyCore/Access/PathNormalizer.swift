/// The path a server will really serve, for credential matching: a credential for `/arcgis` must not go
/// with `/arcgis/../other`, `/arcgis/%2e%2e/other` or `/arcgis/..;/other`, which servers resolve outside
/// `/arcgis`.
///
/// Percent-encoded unreserved characters (RFC 3986 §2.3, `.` included) are decoded and dot-segments removed
/// (§5.2.4). Paths whose meaning differs between servers are reported as ambiguous instead of guessed: an
/// encoded slash (`%2F`), a backslash (IIS reads it as `/`), a dot-segment with path parameters (`..;`, which
/// Tomcat resolves as `..`), and empty segments mixed with dot-segments (`//..`, which servers that merge
/// slashes resolve differently). So are a `%` that is not an escape (IIS decodes `%u002e`), an encoded NUL, a
/// double-encoded dot or slash (`%252e`), and a dot-segment followed by an encoded `;` (`..%3b`).
public enum PathNormalizer {
    public enum Result: Sendable, Equatable {
        case normal(String)
        case ambiguous(String)
    }

    /// Whether `path` has an escape, a backslash, a `;` or a dot-segment.
    private static func needsWork(_ path: Substring.UTF8View) -> Bool {
        var dotsInSegment = 0  // dots since the last '/', or -1 once the segment has another byte
        for c in path {
            switch c {
            case UInt8(ascii: "%"), UInt8(ascii: "\\"), UInt8(ascii: ";"):
                return true
            case UInt8(ascii: "/"):
                if dotsInSegment > 0 { return true }
                dotsInSegment = 0
            case UInt8(ascii: "."):
                if dotsInSegment >= 0 { dotsInSegment += 1 }
            default:
                dotsInSegment = -1
            }
        }
        return dotsInSegment > 0
    }

    public static func normalize(_ path: Substring) -> Result {
        // Fast path: nothing to decode or resolve (the common case costs one scan). A dot only matters as a
        // whole segment (`.` or `..`), not inside a name such as `query.json`.
        if !needsWork(path.utf8) { return .normal(String(path)) }

        var decoded: [UInt8] = []
        decoded.reserveCapacity(path.utf8.count)
        let u = Array(path.utf8)
        var i = 0
        while i < u.count {
            let c = u[i]
            if c == UInt8(ascii: "\\") { return .ambiguous("backslash in path") }
            if c == UInt8(ascii: "%") {
                // IIS (http.sys, where the Web Adaptor runs) decodes `%uXXXX`: `%u002e%u002e` is `..` there. Any
                // `%` that is not an escape is read differently by some server.
                guard i + 2 < u.count, let hi = hexDigitValue(u[i + 1]), let lo = hexDigitValue(u[i + 2]) else {
                    return .ambiguous(
                        "a % in the path that is not followed by two hex digits (%uXXXX is decoded by IIS)")
                }
                let b = hi << 4 | lo
                if b == UInt8(ascii: "/") || b == UInt8(ascii: "\\") { return .ambiguous("encoded slash in path") }
                if b == 0 { return .ambiguous("encoded NUL in path") }
                if isUnreservedURIByte(b) {
                    decoded.append(b)
                } else {
                    // Kept encoded, with upper-case hex so equal paths compare equal.
                    decoded.append(UInt8(ascii: "%"))
                    decoded.append(upperHex(hi))
                    decoded.append(upperHex(lo))
                }
                i += 3
                continue
            }
            decoded.append(c)
            i += 1
        }

        // `%252e`, `%252f`, `%255c`: a server or a filter in front of it that decodes twice sees a dot or a slash.
        // Looked for in the decoded bytes, so a mix of escapes counts too: `%252%65` is `%252e` once `%65` is
        // decoded. Other `%25` (a literal `%` in a name) is kept.
        if Self.hasDoubleEncodedDotOrSlash(decoded) { return .ambiguous("double-encoded dot or slash in path") }

        let segments = decoded.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).dropFirst()
        var hasDot = false
        var hasEmpty = false
        for (n, s) in segments.enumerated() {
            let name = s.prefix { $0 != UInt8(ascii: ";") }
            let isDot = name.elementsEqual([46]) || name.elementsEqual([46, 46])
            if isDot {
                hasDot = true
                if name.count != s.count { return .ambiguous("dot-segment with parameters in path") }
            }
            // `..%3b`: servers that decode before splitting off path parameters (and Tomcat's `..;`) see `..`.
            if Self.isDotsThenEncodedSemicolon(s) { return .ambiguous("dot-segment with parameters in path") }
            if s.isEmpty && n < segments.count - 1 { hasEmpty = true }
        }
        if hasDot && hasEmpty { return .ambiguous("empty and dot-segments in path") }
        guard hasDot else { return .normal(String(decoding: decoded, as: UTF8.self)) }

        var out: [ArraySlice<UInt8>] = []
        let last = segments.count - 1
        for (n, s) in segments.enumerated() {
            if s.elementsEqual([46]) {
                if n == last { out.append([]) }
            } else if s.elementsEqual([46, 46]) {
                if !out.isEmpty { out.removeLast() }
                if n == last { out.append([]) }
            } else {
                out.append(s)
            }
        }
        var result: [UInt8] = []
        for s in out {
            result.append(UInt8(ascii: "/"))
            result.append(contentsOf: s)
        }
        if result.isEmpty { result = [UInt8(ascii: "/")] }
        return .normal(String(decoding: result, as: UTF8.self))
    }

    private static func upperHex(_ v: UInt8) -> UInt8 { v < 10 ? 48 + v : 55 + v }

    /// `%25` followed by two hex digits that encode `.`, `/` or `\` (escapes that stayed encoded are upper-case).
    private static func hasDoubleEncodedDotOrSlash(_ d: [UInt8]) -> Bool {
        var i = 0
        while i + 4 < d.count {
            if d[i] == UInt8(ascii: "%"), d[i + 1] == UInt8(ascii: "2"), d[i + 2] == UInt8(ascii: "5"),
                let hi = hexDigitValue(d[i + 3]), let lo = hexDigitValue(d[i + 4]),
                [UInt8(ascii: "."), UInt8(ascii: "/"), UInt8(ascii: "\\")].contains(hi << 4 | lo)
            {
                return true
            }
            i += 1
        }
        return false
    }

    /// `.%3B…` or `..%3B…` (escapes are upper-case by now).
    private static func isDotsThenEncodedSemicolon(_ s: ArraySlice<UInt8>) -> Bool {
        let dots = s.prefix { $0 == 46 }.count
        guard dots == 1 || dots == 2 else { return false }
        return s.dropFirst(dots).starts(with: [37, 51, 66])
    }
}
