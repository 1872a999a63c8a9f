/// A token service's `expires` is a moment on the *server's* clock (epoch milliseconds), and the server's clock
/// may be off from ours (a mis-set server, a VM resumed without time sync). Compared with the local clock as
/// is, a token from a server running behind would look expired the moment it arrives, and every request would
/// fetch a new one. So the lifetime is measured on the server's own clock — `expires` minus the `Date` of the
/// response that carried it — and laid onto the local clock from the moment the answer arrived.
enum ServerClock {
    /// The lifetime assumed for a token whose expiry, read without a `Date` to correct it, is not after the
    /// moment it arrived: the server just issued it, so it is valid; the server says when it stops being (498).
    static let unknownLifetime: Int64 = 60_000

    /// Clocks this close are taken to agree: `expires` is used as it is (the `Date` header counts whole seconds,
    /// so measuring against it could only blur a short lifetime).
    static let agreement: Int64 = 5_000

    /// The local expiry of a token the server says expires at `expires` (its clock), in an answer dated
    /// `serverDate` (its clock, from the `Date` header; nil when absent or unreadable) that arrived at `now`
    /// (local clock). Never at or before `now`.
    ///
    /// When the clocks disagree by more than ``agreement``, the lifetime is `expires − Date`, less one second:
    /// `Date` is cut to the second, so the answer may have been made up to a second after it says, and a
    /// lifetime read too long would send the token after it expired.
    static func localExpiry(expires: Int64, serverDate: Int64?, now: Int64) -> Int64 {
        var lifetime = expires - now
        if let serverDate, abs(serverDate - now) > agreement { lifetime = expires - serverDate - 1000 }
        return now + (lifetime > 0 ? lifetime : unknownLifetime)
    }

    /// The `Date` of a response, from its header fields (the first `Date`), in epoch milliseconds.
    static func date(in headers: [(name: String, value: String)]) -> Int64? {
        headers.first { $0.name.caseInsensitiveEquals("date") }.flatMap { parseHTTPDate($0.value) }
    }

    /// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`, RFC 9110 §5.6.7), the form every current server sends,
    /// in epoch milliseconds; nil for anything else (the obsolete forms included).
    static func parseHTTPDate(_ value: some StringProtocol) -> Int64? {
        let parts = value.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 6, parts[0].count == 4, parts[0].hasSuffix(","), parts[5] == "GMT",
            let day = Int(parts[1]), parts[1].count == 2, (1...31).contains(day),
            let month = months.firstIndex(of: String(parts[2])),
            let year = Int(parts[3]), parts[3].count == 4
        else { return nil }
        let hms = parts[4].split(separator: ":", omittingEmptySubsequences: false)
        guard parts[4].count == 8, hms.count == 3, let h = Int(hms[0]), let m = Int(hms[1]), let s = Int(hms[2]),
            h < 24, m < 60, s < 61
        else { return nil }
        let days = daysFromCivil(year: year, month: month + 1, day: day)
        return ((Int64(days) * 24 + Int64(h)) * 60 + Int64(m)) * 60_000 + Int64(s) * 1000
    }

    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
    static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }
}
