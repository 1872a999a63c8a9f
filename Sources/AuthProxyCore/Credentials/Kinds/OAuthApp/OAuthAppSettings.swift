/// `type = "oauth-app"`: an app's client id and secret, for the OAuth client-credentials grant at its portal.
public struct OAuthAppSettings: Sendable, Equatable {
    public var clientID: String
    public var clientSecret: String
    /// The portal root, e.g. `https://www.arcgis.com` or `https://host/portal`.
    public var portalURL: String
    public var expirationMinutes: Int?
    /// `sign_in_urls`: where the web tier in front of its servers sends a client to sign in, besides a portal's
    /// sign-in and a SAML request (``SignInRedirect``): a redirect there answering a request with its token rejects
    /// the token.
    public var signInURLs: [String] = []
}
