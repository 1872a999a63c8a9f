#if canImport(Glibc)
    import Glibc
#endif

/// Milliseconds since the epoch as RFC 3339 UTC: `2026-11-23T10:15:00Z`, or with `fraction`
/// `2026-11-23T10:15:00.123Z` (log timestamps). The inverse is `parseRFC3339`.
func rfc3339(millis: Int64, fraction: Bool = false) -> String {
    var t = time_t(millis / 1000)
    var tmv = tm()
    gmtime_r(&t, &tmv)
    func pad(_ v: Int32, _ w: Int) -> String {
        let s = String(v)
        return String(repeating: "0", count: max(0, w - s.count)) + s
    }
    let seconds =
        "\(pad(tmv.tm_year + 1900, 4))-\(pad(tmv.tm_mon + 1, 2))-\(pad(tmv.tm_mday, 2))T"
        + "\(pad(tmv.tm_hour, 2)):\(pad(tmv.tm_min, 2)):\(pad(tmv.tm_sec, 2))"
    return fraction ? seconds + ".\(pad(Int32(millis % 1000), 3))Z" : seconds + "Z"
}
