/// The settings of a `type = "oauth2"` credential (docs/credentials-oidc-gateways.md).
extension OAuth2Settings {
    public static func parse(_ entry: inout TableReader, name: String) throws(ConfigError) -> OAuth2Settings {
        func fail(_ key: String, _ message: String) -> ConfigError {
            ConfigError(
                key: entry.path + (key.isEmpty ? "" : "." + key), line: entry.line(of: key) ?? entry.table.line, message
            )
        }
        func url(_ key: String) throws(ConfigError) -> String? {
            guard let v = try entry.string(key) else { return nil }
            guard let u = HTTPURL.parse(v) else { throw fail(key, "\(entry.shown(key, v)) is not an http(s) URL") }
            return u.string
        }
        func readable(_ key: String) throws(ConfigError) -> String? {
            guard let path = try entry.string(key) else { return nil }
            guard readTextFile(path) != nil else {
                throw fail(key, "cannot read \(entry.shown(key, path)): \(lastErrorString())")
            }
            return path
        }

        // A Google service-account key names the account (the client), its key and its token endpoint.
        let serviceAccountFile = try entry.string("service_account_file")
        var account: ServiceAccountKey? = nil
        if let path = serviceAccountFile {
            switch ServiceAccountKey.read(path: path).flatMap({ a in
                a.signingKey(source: "service_account_file '\(path)'").map { _ in a }
            }) {
            case .failure(let why): throw fail("service_account_file", why.message)
            case .success(let a): account = a
            }
        }
        let grant: OAuth2Settings.Grant
        if let g = try entry.string("grant") {
            guard let known = OAuth2Settings.Grant(rawValue: g) else {
                throw fail(
                    "grant",
                    "\(entry.shown("grant", g)) is not one of "
                        + OAuth2Settings.Grant.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", "))
            }
            grant = known
        } else {
            grant = account != nil ? .jwtBearer : .clientCredentials
        }

        let issuer = try entry.string("issuer")
        let tokenURL = try url("token_url")
        let endpoint: OAuth2Settings.Endpoint
        switch (issuer, tokenURL) {
        case (let i?, nil):
            // Compared with the discovery document's `issuer` exactly, so it is kept as written.
            guard HTTPURL.parse(i) != nil else {
                throw fail("issuer", "\(entry.shown("issuer", i)) is not an http(s) URL")
            }
            endpoint = .issuer(i)
        case (nil, let t?):
            endpoint = .tokenURL(t)
        case (nil, nil) where account != nil:
            let uri = account?.tokenURI ?? ""
            endpoint = .tokenURL(HTTPURL.parse(uri)?.string ?? uri)
        default:
            throw fail(
                "",
                "an oauth2 credential needs exactly one of issuer (OIDC discovery) or token_url (or service_account_file, whose token_uri is the token endpoint)"
            )
        }
        // The service account is the client; a token exchange may have none (a workload identity pool's STS).
        let configuredID = try entry.string("client_id")
        let clientID = configuredID ?? account?.clientEmail ?? ""
        if configuredID?.isEmpty == true || (clientID.isEmpty && grant != .tokenExchange) {
            throw entry.missing("client_id", "credential '\(name)' of type oauth2 needs client_id")
        }
        var s = OAuth2Settings(endpoint: endpoint, clientID: clientID)
        s.grant = grant
        s.serviceAccountFile = serviceAccountFile
        s.clientSecret = try entry.string("client_secret")
        if s.clientSecret?.isEmpty == true { throw fail("client_secret", "is empty") }
        s.authMethod = try entry.enumValue("token_endpoint_auth_method", OAuth2Settings.AuthMethod.self)
        s.privateKey = try readable("private_key")
        s.keyAlgorithm = try entry.enumValue("private_key_alg", OAuth2Settings.KeyAlgorithm.self) ?? .rs256
        s.kid = try entry.string("kid")
        s.certificate = try readable("certificate")
        s.clientAssertionFile = try entry.string("client_assertion_file")
        s.scope = try entry.string("scope")
        s.audience = try entry.string("audience")
        s.resource = try entry.string("resource")
        s.targetAudience = try entry.string("target_audience")
        if s.targetAudience?.isEmpty == true { throw fail("target_audience", "is empty") }
        s.tokenField =
            try entry.enumValue("token_field", OAuth2Settings.TokenField.self)
            ?? (s.targetAudience != nil ? .idToken : .accessToken)
        s.subjectTokenFile = try readable("subject_token_file")
        s.subjectTokenType = try entry.string("subject_token_type") ?? OAuth2Settings.jwtTokenType
        s.requestedTokenType = try entry.string("requested_token_type")
        s.refreshToken = try entry.string("refresh_token")
        s.redirectURI = try entry.string("redirect_uri")
        s.authorizationURL = try url("authorization_url")
        s.placement = try entry.enumValue("token_placement", OAuth2Settings.Placement.self) ?? .header
        s.defaultLifetimeSeconds = try entry.int("default_lifetime_seconds", range: 1...86_400) ?? 300
        if let signals = try rejectionSignals(&entry) {
            s.rejection = signals
        } else if s.targetAudience != nil {
            // Google IAP refuses an ID token with a 401 without a challenge, and sends a browser to sign in at
            // accounts.google.com; a service behind it answering its own 401 is not the ID token's rejection.
            s.rejection = [.iap, .redirectToIssuer]
        }
        try checkGrantKeys(s, account: account, entry: &entry)

        if s.privateKey != nil, s.clientAssertionFile != nil {
            throw fail(
                "client_assertion_file",
                "set either private_key (the proxy signs the assertion) or client_assertion_file (a token issued elsewhere), not both"
            )
        }
        if (s.kid != nil || s.certificate != nil || entry.table["private_key_alg"] != nil), s.privateKey == nil {
            throw fail("private_key", "kid, certificate and private_key_alg describe a private_key, which is not set")
        }
        if let key = s.privateKey {
            do throws(OAuth2Problem) {
                _ = try JWTSigningKey(path: key, algorithm: s.keyAlgorithm)
                if let cert = s.certificate { _ = try JWTSigningKey.thumbprint(certificatePath: cert) }
            } catch {
                throw fail("private_key", error.message)
            }
        }
        switch s.grant {
        case .refreshToken:
            guard s.refreshToken?.isEmpty == false else {
                throw fail(
                    "refresh_token",
                    "grant = \"refresh_token\" needs refresh_token (the first one; rotated ones are kept in the state file)"
                )
            }
        case .clientCredentials, .jwtBearer, .tokenExchange:
            if s.refreshToken != nil { throw fail("refresh_token", "is used only with grant = \"refresh_token\"") }
        case .authorizationCode:
            if s.refreshToken != nil {
                throw fail(
                    "refresh_token",
                    "grant = \"authorization_code\" gets its refresh token from `authproxy login`, not from the configuration"
                )
            }
            guard let redirect = s.redirectURI else {
                throw fail(
                    "redirect_uri",
                    "grant = \"authorization_code\" needs redirect_uri (http://127.0.0.1:PORT/callback, registered with the provider, or urn:ietf:wg:oauth:2.0:oob)"
                )
            }
            guard redirect == "urn:ietf:wg:oauth:2.0:oob" || HTTPURL.parse(redirect) != nil else {
                throw fail(
                    "redirect_uri",
                    "\(entry.shown("redirect_uri", redirect)) is neither an http(s) URL nor urn:ietf:wg:oauth:2.0:oob")
            }
            if case .tokenURL = s.endpoint, s.authorizationURL == nil {
                throw fail(
                    "authorization_url",
                    "grant = \"authorization_code\" with token_url needs authorization_url (discovery would give it with issuer)"
                )
            }
        }
        if s.grant != .authorizationCode {
            if s.redirectURI != nil { throw fail("redirect_uri", "is used only with grant = \"authorization_code\"") }
            if s.authorizationURL != nil {
                throw fail("authorization_url", "is used only with grant = \"authorization_code\"")
            }
        }
        // A jwt_bearer credential's private_key signs the grant, not a client assertion.
        let hasAssertion = (s.privateKey != nil && s.grant != .jwtBearer) || s.clientAssertionFile != nil
        switch s.authMethod {
        case .clientSecretBasic?, .clientSecretPost?:
            if s.clientSecret == nil {
                throw fail(
                    "client_secret", "token_endpoint_auth_method = \"\(s.authMethod!.rawValue)\" needs client_secret")
            }
        case .privateKeyJWT?:
            if !hasAssertion {
                throw fail(
                    "private_key",
                    "token_endpoint_auth_method = \"private_key_jwt\" needs private_key or client_assertion_file")
            }
        case .tlsClientAuth?, .none?:
            break
        case nil:
            if case .tokenURL = s.endpoint, s.clientSecret == nil, !hasAssertion, s.grant == .clientCredentials {
                throw fail(
                    "client_secret",
                    "the client_credentials grant needs client_secret, private_key, client_assertion_file or token_endpoint_auth_method = \"tls_client_auth\""
                )
            }
        }
        if s.clientID.isEmpty, s.authMethod.map({ $0 != .none }) ?? (s.clientSecret != nil || hasAssertion) {
            throw fail("client_id", "client authentication (a secret, a key or an assertion) needs client_id")
        }
        return s
    }

    /// The keys that belong to one grant: `jwt_bearer` (a service-account key or `private_key`, and what it asks
    /// for) and `token_exchange` (the subject token).
    private static func checkGrantKeys(
        _ s: OAuth2Settings, account: ServiceAccountKey?, entry: inout TableReader
    ) throws(ConfigError) {
        func fail(_ key: String, _ message: String) -> ConfigError {
            ConfigError(key: entry.path + "." + key, line: entry.line(of: key) ?? entry.table.line, message)
        }
        if account != nil {
            if s.grant != .jwtBearer {
                throw fail("service_account_file", "is used only with grant = \"jwt_bearer\"")
            }
            for key in ["private_key", "private_key_alg", "kid", "certificate", "client_assertion_file"]
            where entry.table[key] != nil {
                throw fail(key, "the service_account_file holds the key: set one or the other")
            }
        }
        if s.grant == .jwtBearer {
            if account == nil, s.privateKey == nil {
                throw fail(
                    "service_account_file",
                    "grant = \"jwt_bearer\" needs service_account_file (a Google service-account JSON key) or private_key with client_id as the assertion's issuer"
                )
            }
            if s.clientAssertionFile != nil {
                throw fail(
                    "client_assertion_file",
                    "grant = \"jwt_bearer\" signs its own assertion; a token issued elsewhere is exchanged with grant = \"token_exchange\" and subject_token_file"
                )
            }
            if s.targetAudience == nil, s.scope == nil {
                throw fail(
                    "target_audience",
                    "grant = \"jwt_bearer\" needs target_audience (an ID token for that audience: IAP's OAuth client id) or scope (an access token)"
                )
            }
            for key in ["audience", "resource"] where entry.table[key] != nil {
                throw fail(
                    key, "is not sent with grant = \"jwt_bearer\" (the assertion carries target_audience or scope)")
            }
        } else if s.targetAudience != nil {
            throw fail("target_audience", "is used only with grant = \"jwt_bearer\"")
        }
        if s.grant == .tokenExchange {
            guard s.subjectTokenFile != nil else {
                throw fail(
                    "subject_token_file",
                    "grant = \"token_exchange\" needs subject_token_file (the token to exchange, read again for every exchange)"
                )
            }
        } else {
            for key in ["subject_token_file", "subject_token_type", "requested_token_type"]
            where entry.table[key] != nil {
                throw fail(key, "is used only with grant = \"token_exchange\"")
            }
        }
    }

    /// `rejection = ["invalid_token", "401", "iap", "redirect_to_issuer", 403]`: names, or statuses as numbers or
    /// strings.
    private static func rejectionSignals(_ entry: inout TableReader) throws(ConfigError) -> Set<
        OAuth2Settings.RejectionSignal
    >? {
        guard let node = entry.table["rejection"] else { return nil }
        entry.markUsed("rejection")
        let key = entry.path + ".rejection"
        let items: [TOMLNode]
        switch node.value {
        case .array(let a): items = a
        default:
            throw ConfigError(
                key: key, line: node.line, "expected an array such as [\"invalid_token\", \"redirect_to_issuer\"]")
        }
        var out = Set<OAuth2Settings.RejectionSignal>()
        for item in items {
            var status: Int? = nil
            switch item.value {
            case .integer(let n): status = Int(n)
            case .string("invalid_token"): out.insert(.invalidToken)
            case .string("401"): out.insert(.anyUnauthorized)
            case .string("redirect_to_issuer"): out.insert(.redirectToIssuer)
            case .string("iap"): out.insert(.iap)
            case .string(let t) where Int(t) != nil: status = Int(t)
            default:
                throw ConfigError(
                    key: key, line: item.line,
                    "each entry is \"invalid_token\", \"401\", \"iap\", \"redirect_to_issuer\" or an HTTP status such as 403"
                )
            }
            if let status {
                guard (300...599).contains(status) else {
                    throw ConfigError(key: key, line: item.line, "\(status) is not an HTTP status from 300 to 599")
                }
                out.insert(status == 401 ? .anyUnauthorized : .status(status))
            }
        }
        guard !out.isEmpty else {
            throw ConfigError(
                key: key, line: node.line, "needs at least one signal (the default is [\"invalid_token\"])")
        }
        return out
    }
}
