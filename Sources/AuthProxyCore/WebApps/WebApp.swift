/// One `[[app]]`: a web app that uses the `/proxy` endpoint from its own origins, the credentials it may spend
/// there, and optionally the sign-in its users need. A browser cannot send `Proxy-Authorization`, so the origin
/// (and, with ``signIn``, the user's own OIDC token) is what selects and guards the credentials.
public struct WebApp: Sendable, Equatable {
    public var name: String
    /// `scheme://host[:port]`, lowercased, as browsers write `Origin`.
    public var origins: [String]
    /// The credentials the app's requests may use (empty: none, so only public services answer). With
    /// ``signIn``: what a signed-in user whom no rule matches gets.
    public var credentials: [String]
    /// nil: anyone who can load the app may use its credentials (the origin check stops other web pages, not other
    /// people).
    public var signIn: SignInPolicy?

    public init(name: String, origins: [String], credentials: [String], signIn: SignInPolicy? = nil) {
        self.name = name
        self.origins = origins.map { $0.lowercased() }
        self.credentials = credentials
        self.signIn = signIn
    }
}
