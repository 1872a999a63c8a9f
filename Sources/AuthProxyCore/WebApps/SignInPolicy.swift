/// The sign-in an `[[app]]` requires on `/proxy` (`sign_in_issuer`, …): the user's own OIDC token in
/// `Authorization: Bearer`, signed by a key of `issuer`'s JWKS, for one of `audiences`, within its lifetime (give or
/// take `clockSkewSeconds`). `rules` map the token's claims to credentials; the first that matches wins.
public struct SignInPolicy: Sendable, Equatable {
    /// Compared with `iss` exactly; discovery is at `issuer + /.well-known/openid-configuration`.
    public var issuer: String
    /// The token's `aud` must name one of these (the app's client id at the identity provider).
    public var audiences: [String]
    public var clockSkewSeconds: Int
    public var rules: [UserRule]

    public init(issuer: String, audiences: [String], clockSkewSeconds: Int = 60, rules: [UserRule] = []) {
        self.issuer = issuer
        self.audiences = audiences
        self.clockSkewSeconds = clockSkewSeconds
        self.rules = rules
    }

    /// Where the issuer publishes its metadata (OpenID Connect Discovery 1.0 §4): a trailing `/` of the issuer is
    /// not doubled.
    var discoveryURL: String {
        (issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer) + "/.well-known/openid-configuration"
    }
}
