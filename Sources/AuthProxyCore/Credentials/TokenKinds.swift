/// A kind whose value is in its configuration, with its own validity (``TokenSource/fixed``): an API key's slots, a
/// pregenerated token. The token service hands it out without a request.
protocol FixedTokenKind: CredentialKind {
    /// What a rejection of `token` means, when the kind decides it itself (an API key's other slot); nil: the token
    /// service's rule for a token that cannot be refreshed.
    func rejected(
        _ c: Credential, service: TokenService, token: IssuedToken, attempt: Int, replayImpossible: String?
    ) -> TokenRetryPolicy.Action?
    /// An answer that was no rejection: returns true when the kind recorded it itself.
    func accepted(_ c: Credential, service: TokenService, token: IssuedToken) -> Bool
}

extension FixedTokenKind {
    func rejected(
        _ c: Credential, service: TokenService, token: IssuedToken, attempt: Int, replayImpossible: String?
    ) -> TokenRetryPolicy.Action? { nil }
    func accepted(_ c: Credential, service: TokenService, token: IssuedToken) -> Bool { false }
}

/// A kind whose tokens the token service fetches (``TokenSource/fetched``): single flight per scope, cached until
/// their refresh margin, shared with the fleet, refreshed after a rejection. (It declares
/// `public static var fetchesTokens: Bool { true }` too.)
protocol FetchedTokenKind: CredentialKind {
    /// What a token for a request to `target` is for: one scope shares one token.
    func tokenScope(for target: URLTarget) -> TokenScope
    /// Obtains a new token for `root` (a root from ``tokenScope(for:)``; a portal's when `isPortal`); `done` runs
    /// on the fetcher's queue.
    func fetchToken(
        _ c: Credential, root: String, isPortal: Bool, fetcher: TokenFetcher,
        done: @escaping (Result<IssuedToken, TokenError>) -> Void)
    /// The roots its settings name (a `token_url`, a portal), which need no confirmation; `both`: taken as a server
    /// root and a portal root.
    var configuredRoots: [(url: String, both: Bool)] { get }
    /// The portal its settings name, if any (prefetching keys a prefix that is that portal as the portal).
    var portalRoot: String? { get }
    /// Where `prefetch = true` keeps tokens when one token serves every request (an OAuth provider); nil: one
    /// per match prefix's root.
    var prefetchTarget: URLTarget? { get }
    /// How its tokens are bound (``TokenBinding``), for credential `name`; nil: not bound by the proxy.
    func binding(credential name: String) -> TokenBinding?
    /// Where `authproxy signout` revokes its tokens: the portal and the client id; nil: nothing to revoke.
    var revocation: (portal: String, clientID: String)? { get }
}

extension FetchedTokenKind {
    var configuredRoots: [(url: String, both: Bool)] { [] }
    var portalRoot: String? { nil }
    var prefetchTarget: URLTarget? { nil }
    func binding(credential name: String) -> TokenBinding? { nil }
    var revocation: (portal: String, clientID: String)? { nil }
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
