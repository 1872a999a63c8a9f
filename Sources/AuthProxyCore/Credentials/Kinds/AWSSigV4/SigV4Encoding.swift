/// The URI encoding of AWS Signature Version 4 (the "UriEncode" of the SigV4 and S3 documentation): every byte but
/// the unreserved `A-Z a-z 0-9 - . _ ~` as `%XY` with upper-case hex, space as `%20` (never `+`). Pure.
///
/// The server does not sign the bytes it received: it decodes the path and query and encodes them again by this
/// rule. So the proxy does the same with what the client sent, and a client that encodes more or less than AWS does
/// (`%7E` for `~`, a raw `$`, lower-case hex) is still signed the way the server checks it.
enum SigV4Encoding {
    static func isUnreserved(_ b: UInt8) -> Bool {
        (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || (b >= 0x30 && b <= 0x39) || b == 0x2D || b == 0x2E
            || b == 0x5F || b == 0x7E
    }

    private static let hexDigits = Array("0123456789ABCDEF".utf8)

    /// `bytes` encoded; `/` kept as it is when `keepSlash` (a path).
    static func encode(_ bytes: some Sequence<UInt8>, keepSlash: Bool = false) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.underestimatedCount * 3)
        for b in bytes {
            if isUnreserved(b) || (keepSlash && b == 0x2F) {
                out.append(b)
            } else {
                out.append(0x25)
                out.append(hexDigits[Int(b >> 4)])
                out.append(hexDigits[Int(b & 15)])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// `%XY` sequences decoded; a `%` not followed by two hex digits stays a `%`, and `+` stays a `+` (in a path it is
    /// a plus sign, and S3 reads a query's `+` the same way when the client encodes its spaces as `%20`).
    static func percentDecoded(_ s: Substring) -> [UInt8] {
        let u = Array(s.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(u.count)
        var i = 0
        while i < u.count {
            if u[i] == 0x25, i + 2 < u.count, let h = hexValue(u[i + 1]), let l = hexValue(u[i + 2]) {
                out.append(h << 4 | l)
                i += 3
            } else {
                out.append(u[i])
                i += 1
            }
        }
        return out
    }

    private static func hexValue(_ b: UInt8) -> UInt8? {
        switch b {
        case 0x30...0x39: return b - 0x30
        case 0x41...0x46: return b - 0x41 + 10
        case 0x61...0x66: return b - 0x61 + 10
        default: return nil
        }
    }

    /// The canonical URI of `path` (as sent, percent-encoded, without the query).
    ///
    /// S3: each segment decoded and encoded once, segments kept as they are (an object key
    /// may hold `//`, `.` or `..`, and `%2F` stays an encoded slash inside its segment). Other services: the path
    /// normalized (RFC 3986 dot segments removed, empty segments dropped, as botocore does) and then encoded as it
    /// was sent, which encodes its `%` escapes a second time, as the SigV4 documentation requires.
    static func canonicalURI(path: Substring, s3: Bool) -> String {
        if path.isEmpty { return "/" }
        if s3 {
            return path.split(separator: "/", omittingEmptySubsequences: false)
                .map { encode(percentDecoded($0)) }
                .joined(separator: "/")
        }
        let normalized = removingDotSegments(path)
        return encode(normalized.utf8, keepSlash: true)
    }

    /// RFC 3986 §5.2.4 on the segments, empty ones dropped; the leading and a trailing `/` kept.
    static func removingDotSegments(_ path: Substring) -> String {
        var out: [Substring] = []
        for segment in path.split(separator: "/", omittingEmptySubsequences: true) {
            if segment == "." { continue }
            if segment == ".." {
                if !out.isEmpty { out.removeLast() }
                continue
            }
            out.append(segment)
        }
        let trailing = path.hasSuffix("/") && !out.isEmpty ? "/" : ""
        return "/" + out.joined(separator: "/") + trailing
    }

    /// The canonical query string of `query` (as sent, without the `?`): each parameter decoded and encoded again,
    /// `name=` for a parameter without a value, sorted by name and then value.
    static func canonicalQuery(_ query: Substring) -> String {
        guard !query.isEmpty else { return "" }
        var pairs: [(name: String, value: String)] = []
        for item in query.split(separator: "&", omittingEmptySubsequences: true) {
            if let eq = item.firstIndex(of: "=") {
                pairs.append(
                    (encode(percentDecoded(item[..<eq])), encode(percentDecoded(item[item.index(after: eq)...]))))
            } else {
                pairs.append((encode(percentDecoded(item)), ""))
            }
        }
        // Byte order of the encoded strings (the encoded form is ASCII, so `<` on the UTF-8 bytes).
        pairs.sort { a, b in
            if a.name != b.name { return a.name.utf8.lexicographicallyPrecedes(b.name.utf8) }
            return a.value.utf8.lexicographicallyPrecedes(b.value.utf8)
        }
        return pairs.map { "\($0.name)=\($0.value)" }.joined(separator: "&")
    }
}
