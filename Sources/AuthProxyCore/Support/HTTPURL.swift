#if canImport(Glibc)
    import Glibc
#endif

/// An http(s) URL split into the parts the token logic needs.
struct HTTPURL: Sendable, Equatable {
    var target: URLTarget

    static func parse(_ s: String) -> HTTPURL? {
        guard case .absolute(let t)? = try? RequestHeadParser.parseTarget(method: "GET", s) else { return nil }
        return HTTPURL(target: t)
    }

    var string: String { target.url }

    /// The URL text without a trailing slash (paths only; `http://h/` becomes `http://h`).
    var withoutTrailingSlash: String {
        var s = target.url
        while s.hasSuffix("/") { s.removeLast() }
        return s
    }
}

/// Parses an RFC 3339 date-time (`2026-12-31T23:59:00Z`, `…+01:00`, fractional seconds allowed) into
/// milliseconds since the epoch.
func parseRFC3339(_ text: String) -> Int64? {
    let u = Array(text.utf8)
    func num(_ a: Int, _ n: Int) -> Int? {
        guard a + n <= u.count else { return nil }
        var v = 0
        for i in a..<(a + n) {
            guard u[i] >= 48, u[i] <= 57 else { return nil }
            v = v * 10 + Int(u[i] - 48)
        }
        return v
    }
    guard u.count >= 20, u[4] == 45, u[7] == 45, u[10] == 84 || u[10] == 116 || u[10] == 32, u[13] == 58, u[16] == 58,
        let year = num(0, 4), let month = num(5, 2), let day = num(8, 2), let hour = num(11, 2),
        let minute = num(14, 2),
        let second = num(17, 2), (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61
    else { return nil }
    var i = 19
    var millis = 0
    if i < u.count, u[i] == 46 {
        i += 1
        var digits = 0
        while i < u.count, u[i] >= 48, u[i] <= 57 {
            if digits < 3 { millis = millis * 10 + Int(u[i] - 48) }
            digits += 1
            i += 1
        }
        guard digits > 0 else { return nil }
        if digits < 3 { for _ in digits..<3 { millis *= 10 } }
    }
    guard i < u.count else { return nil }
    var offset = 0
    if u[i] == 90 || u[i] == 122 {
        i += 1
    } else if u[i] == 43 || u[i] == 45, let oh = num(i + 1, 2), i + 3 < u.count, u[i + 3] == 58, let om = num(i + 4, 2)
    {
        offset = (oh * 60 + om) * 60 * (u[i] == 43 ? 1 : -1)
        i += 6
    } else {
        return nil
    }
    guard i == u.count else { return nil }
    var t = tm()
    t.tm_year = Int32(year - 1900)
    t.tm_mon = Int32(month - 1)
    t.tm_mday = Int32(day)
    t.tm_hour = Int32(hour)
    t.tm_min = Int32(minute)
    t.tm_sec = Int32(second)
    let epoch = Int64(timegm(&t)) - Int64(offset)
    return epoch * 1000 + Int64(millis)
}
