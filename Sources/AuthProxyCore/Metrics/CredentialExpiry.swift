/// When something a credential depends on stops working by itself: an access token, the refresh token of a
/// sign-in, an API key, a client certificate. Gathered at scrape time from whoever holds the thing (the token
/// service, the configuration, the certificate loader) and shown as `authproxy_credential_expiry_timestamp_seconds`
/// (``CredentialExpiryText``) and on the status page, so an operator is warned before a credential lapses instead
/// of after. Never carries the secret itself.
public struct CredentialExpiry: Sendable, Equatable, Codable {
    public enum What: String, Sendable, Codable, CaseIterable, Comparable {
        case accessToken = "access_token"
        case refreshToken = "refresh_token"
        case key
        case certificate

        public static func < (a: Self, b: Self) -> Bool {
            allCases.firstIndex(of: a)! < allCases.firstIndex(of: b)!
        }
    }

    public var credential: String
    public var what: What
    /// Which one of several, when a credential has more than one of `what` (an API key's slot `"1"`/`"2"`, a token's
    /// server root); nil when it has one.
    public var which: String?
    /// Milliseconds since the epoch.
    public var expires: Int64
    /// When the proxy renews it by itself (a sign-in's refresh-token exchange), milliseconds since the epoch; nil when
    /// nothing renews it automatically (or renewal was refused). A thing renewed before it matters is not due soon,
    /// however close its expiry: a two-week refresh token is always within 14 days of it.
    public var renews: Int64? = nil
    /// Why the last renewal failed (never a secret), for the status page.
    public var problem: String? = nil

    public init(credential: String, what: What, which: String? = nil, expires: Int64) {
        self.credential = credential
        self.what = what
        self.which = which
        self.expires = expires
    }

    /// Whether it lapses within `warningDays` of `now` (or has lapsed), and nothing renews it before that: no
    /// renewal, or its renewal is overdue.
    public func isDueSoon(now: Int64, warningDays: Int) -> Bool {
        if let renews, renews > now { return false }
        return expires - now <= Int64(warningDays) * 86_400_000
    }

    /// The order the status page and the exposition list them in: by credential, kind, then which one.
    static func ordered(_ list: [CredentialExpiry]) -> [CredentialExpiry] {
        list.sorted {
            ($0.credential, $0.what, $0.which ?? "") < ($1.credential, $1.what, $1.which ?? "")
        }
    }
}
