/// `oauth-user`: a user's tokens from the refresh-token grant with the sign-in of `authproxy login` (kept and
/// renewed in the state file), exchanged for federated servers' tokens, injected as ArcGIS tokens on the ArcGIS
/// APIs.
extension OAuthUserSettings: ArcGISTokenKind, FetchedTokenKind {
    public var apiOnly: Bool { true }
    public var signInPages: [String]? { signInURLs }
    public static let typeName = "oauth-user"
    public var tokenSource: TokenSource { .fetched }
    public static var fetchesTokens: Bool { true }
    public var signsIn: Bool { true }

    public var identityMaterial: String { "\(clientID)\u{0}\(portalURL)\u{0}\(redirectURI)" }

    public static func parse(_ entry: inout TableReader, name: String) throws(ConfigError) -> OAuthUserSettings {
        let redirect = try entry.required("redirect_uri", credential: name, type: typeName)
        guard redirect == "urn:ietf:wg:oauth:2.0:oob" || HTTPURL.parse(redirect) != nil else {
            throw ConfigError(
                key: entry.path + ".redirect_uri", line: entry.line(of: "redirect_uri"),
                "\(entry.shown("redirect_uri", redirect)) is neither an http(s) URL nor urn:ietf:wg:oauth:2.0:oob")
        }
        var s = OAuthUserSettings(
            clientID: try entry.required("client_id", credential: name, type: typeName),
            portalURL: try entry.url("portal_url", credential: name, type: typeName, required: true)!,
            redirectURI: redirect)
        s.signInURLs = try entry.urlList("sign_in_urls")
        return s
    }

    func tokenScope(for target: URLTarget) -> TokenScope { .arcgisRoot }

    func fetchToken(
        _ c: Credential, root: String, isPortal: Bool, fetcher: TokenFetcher,
        done: @escaping (Result<IssuedToken, TokenError>) -> Void
    ) {
        if isPortal || ServerRoot.same(root, portalURL) {
            fetcher.refreshGrant(c, self, done: done)
        } else {
            fetcher.viaPortal(c, portal: portalURL, root: root, done: done)
        }
    }

    var configuredRoots: [(url: String, both: Bool)] { [(portalURL, true)] }
    var portalRoot: String? { portalURL }
    func binding(credential name: String) -> TokenBinding? { .referer(TokenBinding.syntheticReferer(credential: name)) }
    var revocation: (portal: String, clientID: String)? { (portalURL, clientID) }

    public func signInFlow(_ c: Credential, fetch: SyncFetch) throws(StateError) -> any AuthorizationCodeFlow {
        try OAuthLogin(credential: c)
    }
}

extension CredentialKind where Self == OAuthUserSettings {
    static func oauthUser(_ s: OAuthUserSettings) -> OAuthUserSettings { s }
}
