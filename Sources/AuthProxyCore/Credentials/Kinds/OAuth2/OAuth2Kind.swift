/// `oauth2`: a generic OAuth 2.0 / OIDC client whose bearer token goes on every matched request (OGC API, GeoServer,
/// an identity-aware gateway), with its own injection (``OAuth2Injection``) and rejection (``OAuth2Rejection``)
/// rules: one token serves every host it matches, kept for its provider.
extension OAuth2Settings: CredentialKind, FetchedTokenKind {
    public static let typeName = "oauth2"
    public static var sharedKeys: SharedCredentialKeys { [.gatewayLayer] }
    public var role: CredentialRole { .token }
    public var tokenSource: TokenSource { .fetched }
    public var secretIsItsToken: Bool { true }
    public static var fetchesTokens: Bool { true }
    public var signsIn: Bool { grant == .authorizationCode }
    public var occupies: [String] {
        switch placement {
        case .header: ["authorization"]
        case .query: ["?access_token"]
        case .proxyAuthorization: ["proxy-authorization"]
        }
    }

    public func prepare(_ request: RequestView) -> Preparation {
        Preparation(
            clientHasOwn: OAuth2Injection.clientHasToken(
                pathAndQuery: request.target.pathAndQuery, headers: request.fields, placement: placement))
    }

    public func apply(_ token: IssuedToken?, to request: inout OutgoingRequest) -> ApplyFailure? {
        guard let token else { return nil }
        // A gateway's token in the query leaves `Authorization` to the service behind it.
        let applied = OAuth2Injection.apply(
            token: token.value, placement: placement, pathAndQuery: request.target.pathAndQuery,
            headers: request.fields, keepingAuthorization: request.layer == .gateway)
        request.target.pathAndQuery = applied.pathAndQuery
        request.fields = applied.headers
        return nil
    }

    /// Read from the head alone: no body is held, no `Accept-Encoding` changed.
    public func rejection(of head: ResponseView) -> Rejection {
        let status = head.status
        guard status >= 300 else { return .none }
        return OAuth2Rejection.isRejection(
            status: status,
            wwwAuthenticate: status == 401 || status == 403 ? head.values("www-authenticate") : [],
            location: status < 400 ? head.first("location") : nil, signals: rejection, issuerHost: providerHost)
            ? .rejected : .none
    }

    public var statusDetails: [(String, String)] { [("provider", providerURL), ("grant", grant.rawValue)] }

    func tokenScope(for target: URLTarget) -> TokenScope { .named(providerURL) }

    func fetchToken(
        _ c: Credential, root: String, isPortal: Bool, fetcher: TokenFetcher,
        done: @escaping (Result<IssuedToken, TokenError>) -> Void
    ) {
        fetcher.oauth2Token(c, self, done: done)
    }

    var prefetchTarget: URLTarget? { HTTPURL.parse(providerURL)?.target }

    public var placementDescription: String? { placement.rawValue }

    public func signInFlow(_ c: Credential, fetch: SyncFetch) throws(StateError) -> any AuthorizationCodeFlow {
        try OAuth2Login(credential: c, fetch: fetch)
    }
}

extension CredentialKind where Self == OAuth2Settings {
    static func oauth2(_ s: OAuth2Settings) -> OAuth2Settings { s }
}

extension Credential {
    /// The `oauth2` settings, when this is one.
    public var oauth2: OAuth2Settings? { kind as? OAuth2Settings }
}
