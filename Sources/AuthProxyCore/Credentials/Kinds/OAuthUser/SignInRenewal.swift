/// When the refresh token of an `oauth-user` sign-in is exchanged for a new one (`grant_type=exchange_refresh_token`),
/// and what a failed exchange means: the decisions of `TokenService+SignInRenewal.swift`, as a value with no I/O and
/// no clock of its own (each call takes `now`, milliseconds since the epoch).
///
/// - **When**: ``margin(issued:expires:)`` before the refresh token expires — a day (arcgis-rest-js exchanges when
///   less than a day is left of a two-week refresh token), but never more than a quarter of the token's life, so a
///   short-lived sign-in (a portal's `expiration` of an hour, a test's minute) still serves three quarters of its
///   life per refresh token instead of being exchanged at once and again and again. The margin is also the time an
///   outage of the portal may last without the sign-in lapsing.
/// - **An outage** (no answer, an error page) is tried again with ``TokenBackoff`` (1 s doubling to 30 s) until the
///   refresh token expires: the same refresh token works once the portal is back.
/// - **A refusal** (the portal says the refresh token is invalid: revoked, or the app's redirect URI changed) cannot
///   be fixed by asking again at once: it is tried again after ``refusalRetry(margin:)`` (at most an hour), and the
///   sign-in ends when the refresh token expires unless someone runs `authproxy login`.
/// - A refresh token that does not expire (`refresh_token_expires_in` of -1 or absent) is never exchanged; one that
///   has expired cannot be (only a new sign-in helps).
///
/// One value per credential; a new refresh token (an exchange here or elsewhere, a new login) starts a new one.
struct SignInRenewal: Equatable, Sendable {
    /// The longest margin: a day, as arcgis-rest-js.
    static let maxMarginMillis: Int64 = 86_400_000
    /// The margin is at most this share of the refresh token's life (1/4).
    static let lifeShare: Int64 = 4
    /// A refused exchange is tried again after at most this long.
    static let maxRefusalRetryMillis: Int64 = 3_600_000

    /// How long before `expires` a refresh token issued at `issued` is exchanged. Unknown issue time (a refresh token
    /// saved by an earlier version): a day.
    static func margin(issued: Int64?, expires: Int64) -> Int64 {
        guard let issued, expires > issued else { return maxMarginMillis }
        return min(maxMarginMillis, (expires - issued) / lifeShare)
    }

    /// When the refresh token is due for its exchange.
    static func dueAt(issued: Int64?, expires: Int64) -> Int64 {
        expires - margin(issued: issued, expires: expires)
    }

    /// How long to wait after a refusal: half the margin (so there is a second try before expiry), at least the
    /// failure backoff's cap and at most an hour.
    static func refusalRetry(margin: Int64) -> Int64 {
        max(TokenBackoff.cap, min(maxRefusalRetryMillis, margin / 2))
    }

    enum Decision: Equatable, Sendable {
        /// Exchange it now.
        case exchange
        /// Nothing before `until`.
        case wait(until: Int64)
        /// Nothing to do: no expiry, already expired, or an exchange is running.
        case none
    }

    /// The refresh token the state below is about: a different one starts afresh (``about(_:)``).
    private(set) var refreshToken: String?
    private(set) var backoff = TokenBackoff()
    /// No exchange before this (after a failure).
    private(set) var retryAt: Int64?
    private(set) var inFlight = false
    /// The last failure's message, for the status page and `check`; nil after a success.
    private(set) var lastError: String?
    /// Whether the last failure was the portal's refusal (no exchange is possible as things are).
    private(set) var refused = false

    init() {}

    /// The state for `refreshToken`: this one if it is about the same refresh token, a fresh one otherwise.
    func about(_ refreshToken: String) -> SignInRenewal {
        if self.refreshToken == refreshToken { return self }
        var fresh = SignInRenewal()
        fresh.refreshToken = refreshToken
        return fresh
    }

    /// What to do at `now` for a refresh token issued at `issued` expiring at `expires` (nil: never).
    func decide(issued: Int64?, expires: Int64?, now: Int64) -> Decision {
        guard let expires, expires > now, !inFlight else { return .none }
        let at = max(Self.dueAt(issued: issued, expires: expires), retryAt ?? 0)
        return at <= now ? .exchange : .wait(until: at)
    }

    /// When the proxy will exchange it by itself, for the expiry seam (``CredentialExpiry/renews``): its due time,
    /// nil once the portal refused (nothing renews it as things are) or when it never expires.
    func renewsAt(issued: Int64?, expires: Int64?) -> Int64? {
        guard let expires, !refused else { return nil }
        return Self.dueAt(issued: issued, expires: expires)
    }

    mutating func started() {
        inFlight = true
    }

    mutating func succeeded() {
        self = SignInRenewal()
    }

    /// The portal did not answer (or answered with an outage): the wait before the next try.
    @discardableResult
    mutating func failed(_ message: String, now: Int64) -> Int64 {
        inFlight = false
        lastError = message
        refused = false
        let wait = backoff.failed(at: now)
        retryAt = now + wait
        return wait
    }

    /// The portal refused the refresh token: the wait before the next try.
    @discardableResult
    mutating func refusedBy(_ message: String, issued: Int64?, expires: Int64, now: Int64) -> Int64 {
        inFlight = false
        lastError = message
        refused = true
        let wait = Self.refusalRetry(margin: Self.margin(issued: issued, expires: expires))
        retryAt = now + wait
        return wait
    }

    /// Another process holds the fleet's lock for this exchange: look again shortly (its result arrives as a notice).
    mutating func deferred(now: Int64) {
        inFlight = false
        retryAt = now + 1000
    }

    /// An exchange that did not happen (the refresh token changed meanwhile): no failure.
    mutating func dropped() {
        inFlight = false
    }
}
