/// What `authproxy login` needs of a sign-in with the authorization-code grant and PKCE, whichever provider runs
/// it: an ArcGIS portal (``OAuthLogin``, `oauth-user`) or any OpenID Connect provider (``OAuth2Login``, `oauth2`).
public protocol AuthorizationCodeFlow {
    var credential: Credential { get }
    /// Where the browser goes to sign in.
    var authorizeURL: String { get }
    /// The loopback port the redirect comes back to; nil for an out-of-band redirect (the code is pasted).
    var loopbackPort: Int? { get }
    /// The code of a redirect's request target, its `state` checked.
    func code(fromCallback target: String) throws(StateError) -> String
    /// Exchanges the code for tokens; the refresh token is what is kept.
    func exchange(code: String, fetch: SyncFetch) throws(StateError) -> OAuthLogin.Grant
}

/// The loopback port of an `http://127.0.0.1:PORT/...` (or localhost) redirect URI.
func loopbackPort(of redirectURI: String) -> Int? {
    guard let u = HTTPURL.parse(redirectURI), u.target.scheme == "http",
        ["127.0.0.1", "localhost", "::1"].contains(u.target.host)
    else { return nil }
    return u.target.port
}
