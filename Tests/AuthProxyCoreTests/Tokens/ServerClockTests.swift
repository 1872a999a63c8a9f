import Testing

@testable import AuthProxyCore

/// A token's `expires` is on the server's clock: its lifetime is measured there and laid onto ours.
@Suite struct ServerClockTests {
    static let now: Int64 = 1_700_000_000_000
    static let tenMinutes: Int64 = 600_000

    @Test func serverClockBehindOrAheadKeepsTheLifetime() {
        for skew: Int64 in [-2 * 3_600_000, -90_000, 45_000, 26 * 3_600_000] {
            let serverNow = Self.now + skew
            let local = ServerClock.localExpiry(
                expires: serverNow + Self.tenMinutes, serverDate: serverNow, now: Self.now)
            // Less the Date header's resolution (whole seconds): never later than the real expiry.
            #expect(local == Self.now + Self.tenMinutes - 1000, "skew \(skew)")
        }
    }

    @Test func agreeingClocksUseExpiresAsIs() {
        // A 4-second token in an answer whose Date was cut to the second: read against the Date it would look
        // up to a second longer than it is.
        for dateOffset: Int64 in [-999, 0, -4_000, 4_000] {
            let local = ServerClock.localExpiry(
                expires: Self.now + 4_000, serverDate: Self.now + dateOffset, now: Self.now)
            #expect(local == Self.now + 4_000, "Date offset \(dateOffset)")
        }
    }

    @Test func withoutADateTheExpiryIsTakenAsIsUnlessAlreadyPast() {
        #expect(
            ServerClock.localExpiry(expires: Self.now + Self.tenMinutes, serverDate: nil, now: Self.now) == Self.now
                + Self.tenMinutes)
        // A token just issued never counts as expired on arrival.
        for expires in [Self.now - 2 * 3_600_000, Self.now] {
            let local = ServerClock.localExpiry(expires: expires, serverDate: nil, now: Self.now)
            #expect(local == Self.now + ServerClock.unknownLifetime)
        }
        // Nor does one whose Date is after its expires (a broken answer).
        #expect(ServerClock.localExpiry(expires: Self.now, serverDate: Self.now + 1000, now: Self.now) > Self.now)
    }

    @Test func issuedTokenFromASkewedServerIsNeitherExpiredNorDueForRefresh() throws {
        let serverNow = Self.now - 2 * 3_600_000  // two hours behind
        let answer = GenerateTokenResponse(token: "t", expires: serverNow + Self.tenMinutes, ssl: false)
        let t = try #require(answer.issuedToken(at: Self.now, serverDate: serverNow))
        #expect(!t.isExpired(at: Self.now) && !t.needsRefresh(at: Self.now + 60_000))
        // The refresh margin works on local times: 10 % of ten minutes before the end.
        #expect(t.needsRefresh(at: Self.now + Self.tenMinutes - 60_000))
        #expect(t.isExpired(at: Self.now + Self.tenMinutes))
        // Without the Date, the old reading made it expired on arrival.
        let naive = try #require(answer.issuedToken(at: Self.now))
        #expect(!naive.isExpired(at: Self.now))
    }

    @Test(arguments: [
        ("Sun, 06 Nov 1994 08:49:37 GMT", Int64(784_111_777_000)),
        ("Thu, 01 Jan 1970 00:00:00 GMT", Int64(0)),
        ("Tue, 29 Feb 2028 23:59:60 GMT", Int64(1_835_481_600_000)),
        ("Tue, 14 Nov 2023 22:13:20 GMT", Int64(1_700_000_000_000)),
    ])
    func parsesIMFFixdate(_ text: String, _ millis: Int64) {
        #expect(ServerClock.parseHTTPDate(text) == millis, "\(text)")
    }

    @Test(arguments: [
        "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", "Sun, 06 Nov 1994 08:49:37 UTC",
        "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 06 Foo 1994 08:49:37 GMT", "Sun, 06 Nov 1994 24:00:00 GMT", "", "garbage",
    ])
    func refusesOtherForms(_ text: String) {
        #expect(ServerClock.parseHTTPDate(text) == nil, "\(text)")
    }

    @Test func dateHeaderLookup() {
        let h = [(name: "Content-Type", value: "text/plain"), (name: "date", value: "Thu, 01 Jan 1970 00:00:01 GMT")]
        #expect(ServerClock.date(in: h) == 1000)
        #expect(ServerClock.date(in: [(name: "Date", value: "yesterday")]) == nil)
        #expect(ServerClock.date(in: []) == nil)
    }
}
