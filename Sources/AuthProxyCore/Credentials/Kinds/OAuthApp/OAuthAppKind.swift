/// `oauth-app`: an app's tokens from the client-credentials grant at its portal, exchanged for federated servers'
/// tokens, injected as ArcGIS tokens (``ArcGISTokenRequests``) on the ArcGIS APIs.
extension OAuthAppSettings: ArcGISTokenKind, FetchedTokenKind {
    public var apiOnly: Bool { true }
    public var signInPages: [String]? { signInURLs }
    public static let typeName = "oauth-app"
    public var tokenSource: TokenSource { .fetched }
    public static var fetchesTokens: Bool { true }

    public var identityMaterial: String {
        "\(clientID)\u{0}\(clientSecret)\u{0}\(portalURL)\u{0}\(expirationMinutes ?? 0)"
    }

    public static func parse(_ entry: inout TableReader, name: String) throws(ConfigError) -> OAuthAppSettings {
        var s = OAuthAppSettings(
            clientID: try entry.required("client_id", credential: name, type: typeName),
            clientSecret: try entry.required("client_secret", credential: name, type: typeName),
            portalURL: try entry.url("portal_url", credential: name, type: typeName, required: true)!,
            expirationMinutes: try entry.int("expiration_minutes", range: 1...20_160))
        s.signInURLs = try entry.urlList("sign_in_urls")
        return s
    }

    func tokenScope(for target: URLTarget) -> TokenScope { .arcgisRoot }

    func fetchToken(
        _ c: Credential, root: String, isPortal: Bool, fetcher: TokenFetcher,
        done: @escaping (Result<IssuedToken, TokenError>) -> Void
    ) {
        if isPortal || ServerRoot.same(root, portalURL) {
            fetcher.clientCredentials(c, self, done: done)
        } else {
            fetcher.viaPortal(c, portal: portalURL, root: root, done: done)
        }
    }

    var configuredRoots: [(url: String, both: Bool)] { [(portalURL, true)] }
    var portalRoot: String? { portalURL }
    func binding(credential name: String) -> TokenBinding? { .referer(TokenBinding.syntheticReferer(credential: name)) }
    var revocation: (portal: String, clientID: String)? { (portalURL, clientID) }
}

extension CredentialKind where Self == OAuthAppSettings {
    static func oauthApp(_ s: OAuthAppSettings) -> OAuthAppSettings { s }
}
