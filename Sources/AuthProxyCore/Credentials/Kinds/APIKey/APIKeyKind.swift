/// `type = "api-key"`: an ArcGIS API key, injected as an ArcGIS token (``ArcGISTokenRequests``) on every matched
/// request; with two slots, a rejected key is replaced by the other slot's on a retry.
extension APIKeySettings: ArcGISTokenKind, FixedTokenKind {
    public var apiOnly: Bool { false }
    public var signInPages: [String]? { nil }
    public static let typeName = "api-key"
    public var tokenSource: TokenSource { .fixed }

    public var identityMaterial: String {
        slots.map { "\($0.number)\u{0}\($0.key)\u{0}\($0.expires ?? 0)" }.joined(separator: "\u{0}")
            + "\u{0}\(referer ?? "")"
    }

    // One key has nothing to switch to: its answers are relayed unread (sniffing every body for a 498 nothing could
    // act on cost each request ~4 % more instructions).
    public var inspectsResponses: Bool { slots.count > 1 }
    public var retriesRejections: Bool { slots.count > 1 }

    public var statusDetails: [(String, String)] { [("keys", summary)] }

    public func expiryWarnings(credential: String, now: Int64, warningDays: Int) -> [String] {
        expiryNotes(credential: credential, now: now, warningDays: warningDays)
    }

    public static func scrapeText(_ credentials: [Credential], tokens: TokenService?) -> String {
        APIKeySlotText.render(
            credentials.flatMap { c in (tokens?.apiKeySlotStates(c) ?? []).map { (credential: c.name, state: $0) } })
    }

    public func fixedToken(_ c: Credential, service: TokenService) -> Result<IssuedToken, TokenError>? {
        service.apiKeyToken(c, self).map { .success($0) } ?? .failure(TokenService.keysExpired(c, self))
    }

    func rejected(
        _ c: Credential, service: TokenService, token: IssuedToken, attempt: Int, replayImpossible: String?
    ) -> TokenRetryPolicy.Action? {
        service.apiKeyRejected(c, self, token: token, attempt: attempt, replayImpossible: replayImpossible)
    }

    func accepted(_ c: Credential, service: TokenService, token: IssuedToken) -> Bool {
        service.apiKeyAccepted(c, self, token: token)
        return true
    }
}

extension CredentialKind where Self == APIKeySettings {
    static func apiKey(_ s: APIKeySettings) -> APIKeySettings { s }
}

extension Credential {
    /// The `api-key` settings, when this is one.
    public var apiKey: APIKeySettings? { kind as? APIKeySettings }
}
