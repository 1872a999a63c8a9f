/// Finds an injected token in bytes a server sends back, in every form a URL or a page can carry it: as is,
/// percent-encoded once or twice (a request URL nested in `ReturnUrl=`, `next=` or `redirect_uri=`, and that
/// one nested again), HTML- or XML-escaped (`&#46;`, `&#x2E;`, `&amp;`), JSON-escaped (`\u002E`, `\/`), or any
/// mix of these character by character, hex digits in either case. Servers choose what to encode: `%2E` for a
/// `.` that needed none is as likely as a bare `.`, and a JSON writer may put `\/` for every `/` of a key.
///
/// Pure: bytes in, ranges out. ``RedirectTokenScrub`` masks what it finds in response header values and in the
/// bodies of redirects, ``ResponseScrubber`` in whole response bodies.
struct EncodedTokenFinder {
    private let token: [UInt8]

    /// The most bytes one character can take: `&#x` with eight hex digits and `;`.
    static let maxEncodedCharacterBytes = 12

    /// The longest form the token can take in a response (every character at its longest encoding): a scan
    /// that holds back one byte less than this never misses a token split across two reads.
    var maxEncodedLength: Int { token.count * Self.maxEncodedCharacterBytes }

    /// nil for an empty token (nothing to look for).
    init?(_ token: String) {
        guard !token.isEmpty else { return nil }
        self.token = Array(token.utf8)
    }

    /// Every non-overlapping occurrence, in order.
    func ranges(in s: UnsafeRawBufferPointer) -> [Range<Int>] {
        var found: [Range<Int>] = []
        var i = 0
        let first = token[0]
        while i < s.count {
            let b = s[i]
            // Only a byte that can start the token's first character is worth a match attempt.
            if b == first || b == 37 || b == 38 || b == 92, let end = match(s, at: i) {
                found.append(i..<end)
                i = end
            } else {
                i += 1
            }
        }
        return found
    }

    /// The end of the token when it starts at `start`.
    private func match(_ s: UnsafeRawBufferPointer, at start: Int) -> Int? {
        var at = start
        for c in token {
            guard let next = Self.character(c, in: s, at: at) else { return nil }
            at = next
        }
        return at
    }

    /// Where the encoded character `c` that starts at `at` ends, if it is there.
    private static func character(_ c: UInt8, in s: UnsafeRawBufferPointer, at: Int) -> Int? {
        guard at < s.count else { return nil }
        let b = s[at]
        // `%`, `&` and `\` start escapes of themselves too (`%25`, `&amp;`, `\\`): the escape is tried first.
        if b == c, c != 37, c != 38, c != 92 { return at + 1 }
        let escaped: Int?
        switch b {
        case 37: escaped = percentEscape(c, in: s, at: at)
        case 92: escaped = jsonEscape(c, in: s, at: at)
        case 38: escaped = at + 3 < s.count ? characterReference(c, in: s, at: at) : nil
        default: escaped = nil
        }
        return escaped ?? (b == c ? at + 1 : nil)
    }

    /// `%XX`, `%25XX`.
    private static func percentEscape(_ c: UInt8, in s: UnsafeRawBufferPointer, at: Int) -> Int? {
        if let v = hexPair(s, at + 1), v == c { return at + 3 }
        if hexPair(s, at + 1) == 0x25, let v = hexPair(s, at + 3), v == c { return at + 5 }
        return nil
    }

    /// `&#NN;`, `&#xHH;`, or a predefined entity.
    private static func characterReference(_ c: UInt8, in s: UnsafeRawBufferPointer, at: Int) -> Int? {
        guard s[at + 1] == 35 else { return namedEntity(c, in: s, at: at) }
        var i = at + 2
        let hex = s[i] | 0x20 == 120
        if hex { i += 1 }
        var v = 0
        var digits = 0
        while i < s.count, digits < 8, let d = hex ? hexDigit(s[i]) : decimalDigit(s[i]) {
            v = v * (hex ? 16 : 10) + d
            digits += 1
            i += 1
        }
        guard digits > 0, i < s.count, s[i] == 59, v == Int(c) else { return nil }
        return i + 1
    }

    /// `\uXXXX`, and `\/`, `\\`, `\"` (the characters JSON may escape as themselves).
    private static func jsonEscape(_ c: UInt8, in s: UnsafeRawBufferPointer, at: Int) -> Int? {
        guard at + 1 < s.count else { return nil }
        let e = s[at + 1]
        if e == c, c == 47 || c == 92 || c == 34 { return at + 2 }
        guard e == 117, hexPair(s, at + 2) == 0, let v = hexPair(s, at + 4), v == c else { return nil }
        return at + 6
    }

    /// The five entities XML predefines (HTML has them too), for the characters a writer must escape.
    private static func namedEntity(_ c: UInt8, in s: UnsafeRawBufferPointer, at: Int) -> Int? {
        let name: StaticString
        switch c {
        case 38: name = "amp;"
        case 60: name = "lt;"
        case 62: name = "gt;"
        case 34: name = "quot;"
        case 39: name = "apos;"
        default: return nil
        }
        let n = name.utf8CodeUnitCount
        guard at + n < s.count else { return nil }
        for k in 0..<n where s[at + 1 + k] != name.utf8Start[k] { return nil }
        return at + 1 + n
    }

    private static func hexPair(_ s: UnsafeRawBufferPointer, _ at: Int) -> UInt8? {
        guard at + 1 < s.count, let h = hexDigit(s[at]), let l = hexDigit(s[at + 1]) else { return nil }
        return UInt8(h * 16 + l)
    }

    private static func hexDigit(_ b: UInt8) -> Int? {
        switch b {
        case 48...57: return Int(b - 48)
        case 65...70: return Int(b - 55)
        case 97...102: return Int(b - 87)
        default: return nil
        }
    }

    private static func decimalDigit(_ b: UInt8) -> Int? {
        (48...57).contains(b) ? Int(b - 48) : nil
    }
}
