import Testing

@testable import AuthProxyCore

/// When a sign-in's refresh token is exchanged, and what a failed exchange means (``SignInRenewal``), on a clock the
/// tests pass in.
@Suite struct SignInRenewalTests {
    static let day: Int64 = 86_400_000
    static let t0: Int64 = 1_700_000_000_000

    @Test func aTwoWeekRefreshTokenIsExchangedADayBeforeItExpires() {
        let expires = Self.t0 + 14 * Self.day
        #expect(SignInRenewal.margin(issued: Self.t0, expires: expires) == Self.day)
        #expect(SignInRenewal.dueAt(issued: Self.t0, expires: expires) == Self.t0 + 13 * Self.day)
        let r = SignInRenewal().about("R1")
        #expect(r.decide(issued: Self.t0, expires: expires, now: Self.t0) == .wait(until: Self.t0 + 13 * Self.day))
        #expect(r.decide(issued: Self.t0, expires: expires, now: Self.t0 + 13 * Self.day) == .exchange)
    }

    @Test func aShortLifeKeepsThreeQuartersOfItself() {
        // A minute: exchanged at 45 s, not at once (a day's margin would exchange it again and again).
        #expect(SignInRenewal.margin(issued: Self.t0, expires: Self.t0 + 60_000) == 15_000)
        #expect(SignInRenewal.dueAt(issued: Self.t0, expires: Self.t0 + 60_000) == Self.t0 + 45_000)
        // Two days: half a day.
        #expect(SignInRenewal.margin(issued: Self.t0, expires: Self.t0 + 2 * Self.day) == Self.day / 2)
        // Four days and more: a day.
        #expect(SignInRenewal.margin(issued: Self.t0, expires: Self.t0 + 4 * Self.day) == Self.day)
        #expect(SignInRenewal.margin(issued: Self.t0, expires: Self.t0 + 90 * Self.day) == Self.day)
    }

    @Test func anUnknownIssueTimeMeansADay() {
        // Saved by an earlier version: a day before expiry, or at once when less than a day is left.
        #expect(SignInRenewal.margin(issued: nil, expires: Self.t0 + 10 * Self.day) == Self.day)
        let r = SignInRenewal().about("R1")
        #expect(r.decide(issued: nil, expires: Self.t0 + Self.day / 2, now: Self.t0) == .exchange)
    }

    @Test func neverExpiringOrExpiredOrRunningMeansNothing() {
        var r = SignInRenewal().about("R1")
        #expect(r.decide(issued: Self.t0, expires: nil, now: Self.t0) == .none)
        #expect(r.decide(issued: Self.t0, expires: Self.t0 + 60_000, now: Self.t0 + 60_000) == .none)
        r.started()
        #expect(r.decide(issued: Self.t0, expires: Self.t0 + 60_000, now: Self.t0 + 50_000) == .none)
    }

    @Test func anOutageIsTriedAgainWithBackoffUntilExpiry() {
        let expires = Self.t0 + 60_000
        var r = SignInRenewal().about("R1")
        var now = Self.t0 + 45_000
        r.started()
        #expect(r.failed("down", now: now) == 1000)
        #expect(r.lastError == "down" && !r.refused)
        #expect(r.decide(issued: Self.t0, expires: expires, now: now + 500) == .wait(until: now + 1000))
        #expect(r.decide(issued: Self.t0, expires: expires, now: now + 1000) == .exchange)
        r.started()
        now += 1000
        #expect(r.failed("down", now: now) == 2000)
        // Still renewed by the proxy (its due time), so not "due soon" while it keeps trying.
        #expect(r.renewsAt(issued: Self.t0, expires: expires) == Self.t0 + 45_000)
        r.succeeded()
        #expect(r.lastError == nil)
    }

    @Test func aRefusalWaitsLongerAndStopsCountingAsRenewed() {
        let expires = Self.t0 + 14 * Self.day
        var r = SignInRenewal().about("R1")
        let now = Self.t0 + 13 * Self.day
        r.started()
        let wait = r.refusedBy("refused", issued: Self.t0, expires: expires, now: now)
        #expect(wait == SignInRenewal.maxRefusalRetryMillis)
        #expect(r.refused && r.lastError == "refused")
        #expect(r.renewsAt(issued: Self.t0, expires: expires) == nil)
        #expect(r.decide(issued: Self.t0, expires: expires, now: now + wait - 1) == .wait(until: now + wait))
        // A one-minute sign-in: at least the failure backoff's cap, so one refusal is not repeated every second.
        #expect(SignInRenewal.refusalRetry(margin: 15_000) == TokenBackoff.cap)
    }

    @Test func aNewRefreshTokenStartsAfresh() {
        var r = SignInRenewal().about("R1")
        r.started()
        r.refusedBy("refused", issued: Self.t0, expires: Self.t0 + 60_000, now: Self.t0 + 45_000)
        #expect(r.about("R1").refused)
        let next = r.about("R2")
        #expect(!next.refused && next.lastError == nil && next.retryAt == nil)
    }

    @Test func theExpirySeamSaysNotDueSoonWhileTheProxyRenewsIt() {
        let now = Self.t0
        var e = CredentialExpiry(credential: "me", what: .refreshToken, expires: now + 10 * Self.day)
        #expect(e.isDueSoon(now: now, warningDays: 14))
        e.renews = now + 9 * Self.day
        #expect(!e.isDueSoon(now: now, warningDays: 14))
        // The exchange is overdue (failing): due soon again.
        #expect(e.isDueSoon(now: now + 9 * Self.day + 1, warningDays: 14))
        let text = CredentialExpiryText.render([e])
        #expect(
            text.contains("authproxy_credential_renewal_timestamp_seconds{credential=\"me\",what=\"refresh_token\"}"))
    }

    @Test func aNonPositiveRefreshLifeMeansNoExpiry() {
        #expect(OAuthTokenResponse.refreshExpiry(-1, now: Self.t0) == nil)
        #expect(OAuthTokenResponse.refreshExpiry(nil, now: Self.t0) == nil)
        #expect(OAuthTokenResponse.refreshExpiry(60, now: Self.t0) == Self.t0 + 60_000)
    }
}
