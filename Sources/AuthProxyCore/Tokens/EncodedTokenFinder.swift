/// Finds an injected token in bytes a server sends back, in every form a URL or a page can carry it: as is,
/// percent-encoded once or twice (a request URL nested in `ReturnUrl=`, `next=` or `redirect_uri=`, and that
/// one nested again), HTML-escaped (`&#46;`, `&#x2E;`), or any mix of these character by character, hex digits
/// in either case. Servers choose what to encode: `%2E` for a `.` that needed none is as likely as a bare `.`.
///
/// Pure: bytes in, ranges out. ``RedirectTokenScrub`` masks what it finds in response header values and in the
/// bodies of redirects.
struct EncodedTokenFinder {
    private let token: [UInt8]

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
            if b == first || b == 37 || b == 38, let end = match(s, at: i) {
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
        if b == c { return at + 1 }
        if b == 37 {  // %XX, %25XX
            if let v = hexPair(s, at + 1), v == c { return at + 3 }
            if hexPair(s, at + 1) == 0x25, let v = hexPair(s, at + 3), v == c { return at + 5 }
            return nil
        }
        if b == 38, at + 3 < s.count, s[at + 1] == 35 {  // &#NN; &#xHH;
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
        return nil
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
