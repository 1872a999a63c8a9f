/// `type = "token"`: a token generated elsewhere (the portal's or server's own `generateToken` page), with the
/// referer it is bound to and its expiry; injected as is until it expires.
public struct PregeneratedToken: Sendable, Equatable {
    public var token: String
    public var referer: String?
    /// Milliseconds since the epoch.
    public var expires: Int64?

    public init(token: String, referer: String?, expires: Int64?) {
        self.token = token
        self.referer = referer
        self.expires = expires
    }
}

extension PregeneratedToken: ArcGISTokenKind, FixedTokenKind {
    public var apiOnly: Bool { false }
    public var signInPages: [String]? { nil }
    public static let typeName = "token"
    public var tokenSource: TokenSource { .fixed }
    public var identityMaterial: String { "\(token)\u{0}\(referer ?? "")\u{0}\(expires ?? 0)" }
    // Nothing to refresh, but a rejection gets a clear answer naming the token's expiry rather than the server's.
    public var inspectsResponses: Bool { true }
    public var retriesRejections: Bool { false }

    public static func parse(_ entry: inout TableReader, name: String) throws(ConfigError) -> PregeneratedToken {
        PregeneratedToken(
            token: try entry.sendableToken("token", credential: name, type: typeName),
            referer: try entry.checkedReferer(entry.string("referer")),
            expires: try entry.dateTime("expires"))
    }

    public var statusDetails: [(String, String)] {
        expires.map { [("expires", rfc3339(millis: $0))] } ?? []
    }

    public func expiryWarnings(credential: String, now: Int64, warningDays: Int) -> [String] {
        guard let expires, expires <= now else { return [] }
        return [
            "credential '\(credential)': its pregenerated token expired (expires is in the past); requests get 502 until it is renewed"
        ]
    }

    public func fixedToken(_ c: Credential, service: TokenService) -> Result<IssuedToken, TokenError>? {
        if let expires, service.clock.nowMillis() >= expires {
            return .failure(
                TokenError(
                    credential: c.name,
                    message:
                        "the pregenerated token has expired; put a new token in proxy.conf and reload (SIGHUP) or restart"
                ))
        }
        return .success(IssuedToken(value: token, expires: expires, issued: 0, ssl: false, referer: referer))
    }
}

extension CredentialKind where Self == PregeneratedToken {
    static func token(token: String, referer: String?, expires: Int64?) -> PregeneratedToken {
        PregeneratedToken(token: token, referer: referer, expires: expires)
    }
}
