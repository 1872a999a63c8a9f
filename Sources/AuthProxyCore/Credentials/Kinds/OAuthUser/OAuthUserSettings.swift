/// `type = "oauth-user"`: a user's sign-in, kept as the refresh token `authproxy login` obtained.
public struct OAuthUserSettings: Sendable, Equatable {
    public var clientID: String
    public var portalURL: String
    public var redirectURI: String
    /// `sign_in_urls`: where the web tier in front of its servers sends a client to sign in, besides a portal's
    /// sign-in and a SAML request (``SignInRedirect``): a redirect there answering a request with its token rejects
    /// the token.
    public var signInURLs: [String] = []
}
