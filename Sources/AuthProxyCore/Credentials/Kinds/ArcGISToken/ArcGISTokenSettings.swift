/// `type = "arcgis-token"`: a built-in ArcGIS user's username and password, for `generateToken`.
public struct ArcGISTokenSettings: Sendable, Equatable {
    public var username: String
    public var password: String
    /// nil: discovered from `<server root>/rest/info?f=json`.
    public var tokenURL: String?
    /// The referer tokens are bound to (with `client` "referer"): the configured one, else the credential's
    /// synthetic one (``TokenBinding/syntheticReferer(credential:)``).
    public var referer: String?
    /// nil: the server's `shortLivedTokenValidity`.
    public var expirationMinutes: Int?
    /// `client` field of generateToken: "referer" (the default) or "requestip"/"ip" when configured.
    public var client: String
    /// Whether ``referer`` is the synthetic one (no `referer` configured).
    public var syntheticReferer: Bool = false
    /// `sign_in_urls`: where the web tier in front of its servers sends a client to sign in, besides a portal's
    /// sign-in and a SAML request (``SignInRedirect``): a redirect there answering a request with its token rejects
    /// the token.
    public var signInURLs: [String] = []
}
