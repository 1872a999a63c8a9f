/// A kind whose value is in its configuration, with its own validity (``TokenSource/fixed``): an API key's slots, a
/// pregenerated token. The token service hands it out without a request.
protocol FixedTokenKind: CredentialKind {
    /// The value to apply now, or why there is none (every key expired).
    func fixedToken(_ c: Credential, service: TokenService) -> Result<IssuedToken, TokenError>
}

/// A kind whose tokens the token service fetches (``TokenSource/fetched``): single flight per scope, cached until
/// their refresh margin, shared with the fleet, refreshed after a rejection.
protocol FetchedTokenKind: CredentialKind {
    /// What a token for a request to `target` is for: one scope shares one token.
    func tokenScope(for target: URLTarget) -> TokenScope
    /// Obtains a new token for `scope` (a root from ``tokenScope(for:)``); `done` runs on the fetcher's queue.
    func fetchToken(
        _ c: Credential, root: String, isPortal: Bool, fetcher: TokenFetcher,
        done: @escaping (Result<IssuedToken, TokenError>) -> Void)
}

/// What one token serves.
enum TokenScope: Equatable {
    /// The ArcGIS server or portal root of the request, confirmed as one before any secret is spent on it
    /// (``RootConfirmations``).
    case arcgisRoot
    /// A root the kind names (an OAuth provider for every host it matches, a storage container): no confirmation.
    case named(String)
    /// No token can serve this request, for the reason given (the client gets a 502 naming it).
    case refused(String)
}
