/// `authproxy login` for an `oauth2` credential with `grant = "authorization_code"`: the authorization-code flow
/// with PKCE (RFC 7636, S256) against the provider's authorization endpoint (from discovery, or
/// `authorization_url`), the code exchanged at its token endpoint with the credential's client authentication. The
/// refresh token is stored in the state file; the running proxy uses it for the refresh-token grant.
public struct OAuth2Login: AuthorizationCodeFlow {
    public let credential: Credential
    let settings: OAuth2Settings
    let verifier: String
    let state: String
    let authorizationEndpoint: String
    let tokenEndpoint: String
    let authMethod: OAuth2Settings.AuthMethod

    /// Resolves the endpoints (a discovery request when the credential names an issuer) with `fetch`.
    public init(credential: Credential, fetch: SyncFetch) throws(StateError) {
        guard let s = credential.kind as? OAuth2Settings, s.grant == .authorizationCode, s.redirectURI != nil else {
            throw StateError(
                "credential '\(credential.name)' is not an oauth2 credential with grant = \"authorization_code\"")
        }
        var authorization = s.authorizationURL
        var token: String
        var supported: [String]? = nil
        switch s.endpoint {
        case .tokenURL(let t):
            token = t
        case .issuer(let issuer):
            let url = OAuth2Discovery.documentURL(issuer: issuer)
            let r = fetch.get(
                url, network: HTTPURL.parse(url).map { fetch.network(for: $0.target) } ?? NetworkAuth(),
                bodyLimit: HTTPFetch.maxBody)
            switch r {
            case .failure(let e): throw StateError("OIDC discovery \(url) failed: \(e.message)")
            case .success(let answer):
                guard answer.status == 200 else {
                    throw StateError("OIDC discovery \(url) answered HTTP \(answer.status)")
                }
                switch OAuth2Discovery.parse(answer.body, configuredIssuer: issuer) {
                case .failure(let why): throw StateError("OIDC discovery \(url): \(why.message)")
                case .success(let d):
                    token = d.tokenEndpoint
                    supported = d.authMethodsSupported
                    authorization = authorization ?? d.authorizationEndpoint
                }
            }
        }
        guard let authorization else {
            throw StateError("the discovery document names no authorization_endpoint: set authorization_url")
        }
        switch OAuth2Discovery.authMethod(
            configured: s.authMethod, supported: supported, hasSecret: s.clientSecret != nil,
            hasAssertion: s.privateKey != nil || s.clientAssertionFile != nil)
        {
        case .failure(let why): throw StateError(why.message)
        case .success(let m): authMethod = m
        }
        self.credential = credential
        settings = s
        authorizationEndpoint = authorization
        tokenEndpoint = token
        verifier = base64url(Crypto.random(32))
        state = base64url(Crypto.random(16))
    }

    var challenge: String { base64url(Crypto.sha256(Array(verifier.utf8))) }

    public var authorizeURL: String {
        var fields = [
            ("response_type", "code"), ("client_id", settings.clientID), ("redirect_uri", settings.redirectURI ?? ""),
        ]
        if let scope = settings.scope { fields.append(("scope", scope)) }
        if let resource = settings.resource { fields.append(("resource", resource)) }
        fields += [("state", state), ("code_challenge", challenge), ("code_challenge_method", "S256")]
        let joiner = authorizationEndpoint.contains("?") ? "&" : "?"
        return authorizationEndpoint + joiner + TokenInjection.formEncoded(fields)
    }

    public var loopbackPort: Int? { AuthProxyCore.loopbackPort(of: settings.redirectURI ?? "") }

    public func code(fromCallback target: String) throws(StateError) -> String {
        try OAuthLogin.code(fromCallback: target, state: state)
    }

    public func exchange(code: String, fetch: SyncFetch) throws(StateError) -> OAuthLogin.Grant {
        var proof = OAuth2TokenRequest.ClientProof.settings
        if authMethod == .privateKeyJWT {
            switch TokenFetcher.clientAssertion(
                settings, audience: TokenFetcher.redacted(tokenEndpoint), now: nowMillis() / 1000)
            {
            case .failure(let why): throw StateError(why.message)
            case .success(let jwt): proof = .assertion(jwt)
            }
        }
        let request = OAuth2TokenRequest.make(
            settings, method: authMethod, proof: proof,
            grant: .code(code, redirectURI: settings.redirectURI ?? "", verifier: verifier))
        let r = try fetch.post(tokenEndpoint, form: request.fields, headers: request.headers)
        switch OAuth2TokenAnswer.classify(
            status: r.status, body: r.body, now: nowMillis(), defaultLifetimeSeconds: settings.defaultLifetimeSeconds)
        {
        case .token(_, let refresh?):
            return OAuthLogin.Grant(refreshToken: refresh, refreshExpires: nil, username: nil)
        case .token(_, nil):
            throw StateError(
                "the provider returned no refresh_token (ask for it: scope offline_access on many providers)")
        case .refused(let error, let description):
            throw StateError("the token endpoint refused the code: \(error)\(description.map { " (\($0))" } ?? "")")
        case .outage(let why):
            throw StateError("the token endpoint answered \(why)")
        }
    }
}
