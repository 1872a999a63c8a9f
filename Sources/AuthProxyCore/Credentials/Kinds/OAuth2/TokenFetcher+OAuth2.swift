import Foundation
import Logging

/// Token requests of `oauth2` credentials: the token endpoint (from OIDC discovery or `token_url`), the client
/// authentication, and the reading of the answer (``OAuth2TokenAnswer``). Runs on the token service's queue, like
/// the rest of ``TokenFetcher``; caching, single flight and backoff are ``TokenCache``'s, as for ArcGIS tokens.
extension TokenFetcher {
    /// How long a discovery document is reused while token requests succeed; a failed token request drops it at
    /// once, so a provider that moved its endpoint is followed at the next attempt.
    static let discoveryLifetime: Int64 = 24 * 60 * 60 * 1000

    /// Where the token request goes and which methods the provider announced.
    struct OAuth2Endpoint {
        var tokenURL: String
        var mtlsTokenURL: String?
        var authMethodsSupported: [String]?
        var discovered: Bool
    }

    func oauth2Token(_ c: Credential, _ o: OAuth2Settings, done: @escaping (Result<IssuedToken, TokenError>) -> Void) {
        oauth2Endpoint(c, o) { [self] endpoint in
            switch endpoint {
            case .failure(let e):
                done(.failure(e))
            case .success(let ep):
                requestOAuth2Token(c, o, endpoint: ep, done: done)
            }
        }
    }

    private func oauth2Endpoint(
        _ c: Credential, _ o: OAuth2Settings, done: @escaping (Result<OAuth2Endpoint, TokenError>) -> Void
    ) {
        let issuer: String
        switch o.endpoint {
        case .tokenURL(let url):
            done(.success(OAuth2Endpoint(tokenURL: url, discovered: false)))
            return
        case .issuer(let i):
            issuer = i
        }
        if let d = discoveries[issuer], clock.nowMillis() - d.fetchedAt < Self.discoveryLifetime {
            done(.success(Self.endpoint(d.document)))
            return
        }
        let url = OAuth2Discovery.documentURL(issuer: issuer)
        let route: ParentRoute?
        switch parentRoute(url) {
        case .success(let r): route = r
        case .failure(let refusal):
            done(
                .failure(
                    TokenError(credential: c.name, message: "OIDC discovery \(Self.redacted(url)): \(refusal.message)"))
            )
            return
        }
        let f = HTTPFetch(
            multi: multi, method: "GET", url: url, form: nil, timeoutSeconds: timeoutSeconds,
            network: network(for: url), route: route
        ) { [self] result in
            switch result {
            case .failure(let err):
                done(
                    .failure(
                        TokenError(
                            credential: c.name, message: "OIDC discovery \(Self.redacted(url)) failed: \(err.message)"))
                )
            case .success(let r) where r.status != 200:
                done(
                    .failure(
                        TokenError(
                            credential: c.name,
                            message: "OIDC discovery \(Self.redacted(url)) answered HTTP \(r.status)")))
            case .success(let r):
                switch OAuth2Discovery.parse(r.body, configuredIssuer: issuer) {
                case .failure(let why):
                    var e = TokenError(
                        credential: c.name, message: "OIDC discovery \(Self.redacted(url)): \(why.message)")
                    e.refused = true
                    done(.failure(e))
                case .success(let d):
                    discoveries[issuer] = (d, clock.nowMillis())
                    done(.success(Self.endpoint(d)))
                }
            }
        }
        f.captureCredential = c.name
        f.start()
    }

    private static func endpoint(_ d: OAuth2Discovery) -> OAuth2Endpoint {
        OAuth2Endpoint(
            tokenURL: d.tokenEndpoint, mtlsTokenURL: d.mtlsTokenEndpoint,
            authMethodsSupported: d.authMethodsSupported, discovered: true)
    }

    private func requestOAuth2Token(
        _ c: Credential, _ o: OAuth2Settings, endpoint ep: OAuth2Endpoint,
        done: @escaping (Result<IssuedToken, TokenError>) -> Void
    ) {
        func local(_ message: String) {
            done(.failure(TokenError(credential: c.name, message: message, local: true)))
        }
        let method: OAuth2Settings.AuthMethod
        switch OAuth2Discovery.authMethod(
            configured: o.authMethod, supported: ep.authMethodsSupported,
            hasSecret: o.clientSecret != nil,
            hasAssertion: (o.privateKey != nil && o.grant != .jwtBearer) || o.clientAssertionFile != nil)
        {
        case .failure(let why):
            var e = TokenError(credential: c.name, message: why.message)
            e.refused = true
            e.loginRefused = true
            done(.failure(e))
            return
        case .success(let m):
            method = m
        }
        let url = method == .tlsClientAuth ? ep.mtlsTokenURL ?? ep.tokenURL : ep.tokenURL
        let network = network(for: url)
        if method == .tlsClientAuth, network.certificate == nil {
            local(
                "tls_client_auth needs a certificate credential whose match covers the token endpoint \(Self.redacted(url))"
            )
            return
        }
        var proof = OAuth2TokenRequest.ClientProof.settings
        if method == .privateKeyJWT {
            switch clientAssertion(o, audience: Self.redacted(url)) {
            case .failure(let why):
                local(why.message)
                return
            case .success(let jwt):
                proof = .assertion(jwt)
            }
        }
        var refresh: String? = nil
        let grant: OAuth2TokenRequest.GrantFields
        switch o.grant {
        case .clientCredentials:
            grant = .clientCredentials
        case .refreshToken:
            refresh = host.refreshToken(for: c) ?? o.refreshToken
            grant = .refresh(refresh ?? "")
        case .authorizationCode:
            // The state file is the authority (`authproxy login` writes it): looked at before every refresh grant.
            guard let stored = host.refreshToken(for: c) else {
                local(
                    "not signed in (or signed out): sign in with `authproxy login --config <file> --credential \(c.name)`"
                )
                return
            }
            refresh = stored
            grant = .refresh(stored)
        case .jwtBearer:
            switch Self.jwtBearerAssertion(o, audience: Self.redacted(url), now: clock.nowMillis() / 1000) {
            case .failure(let why):
                local(why.message)
                return
            case .success(let jwt):
                grant = .jwtBearer(assertion: jwt)
            }
        case .tokenExchange:
            switch Self.subjectToken(o) {
            case .failure(let why):
                local(why.message)
                return
            case .success(let token):
                grant = .tokenExchange(subjectToken: token)
            }
        }
        let request = OAuth2TokenRequest.make(o, method: method, proof: proof, grant: grant)
        let route: ParentRoute?
        switch parentRoute(url) {
        case .success(let r): route = r
        case .failure(let refusal):
            done(
                .failure(
                    TokenError(credential: c.name, message: "token endpoint \(Self.redacted(url)): \(refusal.message)"))
            )
            return
        }
        let f = HTTPFetch(
            multi: multi, method: "POST", url: url, form: request.fields, timeoutSeconds: timeoutSeconds,
            network: network, route: route, headers: request.headers
        ) { [self] result in
            let where_ = "token endpoint \(Self.redacted(url))"
            switch result {
            case .failure(let err):
                if ep.discovered, case .issuer(let i) = o.endpoint { discoveries[i] = nil }
                done(.failure(TokenError(credential: c.name, message: "\(where_) failed: \(err.message)")))
            case .success(let r):
                let now = clock.nowMillis()
                switch OAuth2TokenAnswer.classify(
                    status: r.status, body: r.body, now: now,
                    defaultLifetimeSeconds: o.defaultLifetimeSeconds, field: o.tokenField)
                {
                case .token(let t, let rotated):
                    if o.grant == .refreshToken || o.grant == .authorizationCode, let rotated, rotated != refresh {
                        host.keepRotatedRefreshToken(c, rotated)
                    }
                    done(.success(t))
                case .refused(let error, let description):
                    var e = TokenError(
                        credential: c.name,
                        message: "\(where_) refused: \(error)\(description.map { " (\($0))" } ?? "")",
                        details: Self.oauth2Advice(error, o, method: method))
                    e.refused = true
                    e.loginRefused = true
                    done(.failure(e))
                case .outage(let why):
                    if ep.discovered, case .issuer(let i) = o.endpoint { discoveries[i] = nil }
                    var e = TokenError(credential: c.name, message: "\(where_) answered \(why)")
                    if r.status == 429 || r.status == 503,
                        let v = r.headers.first(where: { $0.name.caseInsensitiveEquals("retry-after") })?.value,
                        let s = RetryPolicy.retryAfterSeconds(
                            v, responseDate: ServerClock.date(in: r.headers), now: now)
                    {
                        e.retryAfter = Int64(s) * 1000
                    }
                    done(.failure(e))
                }
            }
        }
        f.captureCredential = c.name
        f.start()
    }

    /// The `client_assertion` for one token request: the projected token file read now (it is rotated under the
    /// proxy: oauth2-proxy #3028 read it once and failed an hour later), or a JWT signed with the private key.
    private func clientAssertion(_ o: OAuth2Settings, audience: String) -> Result<String, OAuth2Problem> {
        Self.clientAssertion(o, audience: audience, now: clock.nowMillis() / 1000)
    }

    static func clientAssertion(_ o: OAuth2Settings, audience: String, now: Int64) -> Result<String, OAuth2Problem> {
        if let file = o.clientAssertionFile {
            guard let text = readTextFile(file) else {
                return .failure(.init("cannot read client_assertion_file '\(file)': \(lastErrorString())"))
            }
            let jwt = String(text.trimmingWhitespace())
            guard !jwt.isEmpty else { return .failure(.init("client_assertion_file '\(file)' is empty")) }
            return .success(jwt)
        }
        guard let keyPath = o.privateKey else {
            return .failure(.init("private_key_jwt needs private_key or client_assertion_file"))
        }
        do {
            let key = try JWTSigningKey(path: keyPath, algorithm: o.keyAlgorithm)
            let x5t = try o.certificate.map { (p: String) throws(OAuth2Problem) -> String in
                try JWTSigningKey.thumbprint(certificatePath: p)
            }
            guard let jwt = key.assertion(clientID: o.clientID, audience: audience, kid: o.kid, x5tS256: x5t, now: now)
            else { return .failure(.init("signing the client assertion with '\(keyPath)' failed in libcrypto")) }
            return .success(jwt)
        } catch {
            return .failure(error)
        }
    }

    /// The jwt-bearer grant's assertion for one token request (``JWTBearerGrant``), signed with the service
    /// account's key (its file read now: a rotated key is used without a reload) or with `private_key`, `aud` the
    /// token endpoint it is sent to.
    static func jwtBearerAssertion(_ o: OAuth2Settings, audience: String, now: Int64) -> Result<String, OAuth2Problem> {
        let key: JWTSigningKey
        let issuer: String
        let kid: String?
        let source: String
        if let path = o.serviceAccountFile {
            source = "service_account_file '\(path)'"
            switch ServiceAccountKey.read(path: path).flatMap({ a in
                a.signingKey(source: source).map { (a, $0) }
            }) {
            case .failure(let why): return .failure(why)
            case .success(let (account, k)):
                key = k
                issuer = account.clientEmail
                kid = account.privateKeyID
            }
        } else if let path = o.privateKey {
            source = "'\(path)'"
            do {
                key = try JWTSigningKey(path: path, algorithm: o.keyAlgorithm)
            } catch {
                return .failure(error)
            }
            issuer = o.clientID
            kid = o.kid
        } else {
            return .failure(.init("grant jwt_bearer needs service_account_file or private_key"))
        }
        let header = JWTBearerGrant.header(alg: key.algorithm, kid: kid)
        let claims = JWTBearerGrant.claims(
            issuer: issuer, audience: audience, targetAudience: o.targetAudience, scope: o.scope, issuedAt: now)
        guard let jwt = key.signed(header: header, claims: claims) else {
            return .failure(.init("signing the jwt-bearer assertion with the key of \(source) failed in libcrypto"))
        }
        return .success(jwt)
    }

    /// The subject token of an RFC 8693 exchange, read from its file now (a projected token is rotated under the
    /// proxy).
    static func subjectToken(_ o: OAuth2Settings) -> Result<String, OAuth2Problem> {
        guard let file = o.subjectTokenFile else { return .failure(.init("token_exchange needs subject_token_file")) }
        guard let text = readTextFile(file) else {
            return .failure(.init("cannot read subject_token_file '\(file)': \(lastErrorString())"))
        }
        let token = String(text.trimmingWhitespace())
        guard !token.isEmpty else { return .failure(.init("subject_token_file '\(file)' is empty")) }
        return .success(token)
    }

    /// What to check for a refusal, beside the provider's own words.
    static func oauth2Advice(_ error: String, _ o: OAuth2Settings, method: OAuth2Settings.AuthMethod) -> [String] {
        switch error {
        case "invalid_client", "unauthorized_client":
            return [
                "The provider does not accept the client's authentication (\(method.rawValue)): check client_id, the secret or key registered for it, and token_endpoint_auth_method."
            ]
        case "invalid_scope":
            return ["Check scope, audience and resource against what the client may ask for."]
        case "invalid_target":
            return ["The provider will not issue a token for this audience or resource: check audience and resource."]
        case "invalid_grant":
            switch o.grant {
            case .refreshToken:
                return [
                    "The refresh token expired, was revoked or was used twice: put a new refresh_token in proxy.conf and reload."
                ]
            case .authorizationCode:
                return [
                    "The sign-in expired or was revoked: sign in again with `authproxy login --config <file> --credential <name>`."
                ]
            case .clientCredentials:
                return ["The provider refuses the grant for this client."]
            case .jwtBearer:
                return [
                    "The provider refused the signed assertion: check that the service account's key is active (not deleted or disabled), that target_audience or scope is one it may ask for, and the clocks."
                ]
            case .tokenExchange:
                return [
                    "The provider refused the subject token: check that subject_token_file holds a current token, subject_token_type, and that the provider trusts the token's issuer for this audience."
                ]
            }
        default:
            return []
        }
    }
}
