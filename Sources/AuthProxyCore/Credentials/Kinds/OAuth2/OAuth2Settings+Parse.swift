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
        default:
            throw fail("", "an oauth2 credential needs exactly one of issuer (OIDC discovery) or token_url")
        }
        guard let clientID = try entry.string("client_id"), !clientID.isEmpty else {
            throw entry.missing("client_id", "credential '\(name)' of type oauth2 needs client_id")
        }
        var s = OAuth2Settings(endpoint: endpoint, clientID: clientID)
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
        if let grant = try entry.string("grant") {
            guard let g = OAuth2Settings.Grant(rawValue: grant) else {
                throw fail(
                    "grant",
                    "\(entry.shown("grant", grant)) is not one of \"client_credentials\", \"refresh_token\", \"authorization_code\""
                )
            }
            s.grant = g
        }
        s.refreshToken = try entry.string("refresh_token")
        s.redirectURI = try entry.string("redirect_uri")
        s.authorizationURL = try url("authorization_url")
        s.placement = try entry.enumValue("token_placement", OAuth2Settings.Placement.self) ?? .header
        s.defaultLifetimeSeconds = try entry.int("default_lifetime_seconds", range: 1...86_400) ?? 300
        if let signals = try rejectionSignals(&entry) { s.rejection = signals }

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
        case .clientCredentials:
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
        let hasAssertion = s.privateKey != nil || s.clientAssertionFile != nil
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
        return s
    }

    /// `rejection = ["invalid_token", "401", "redirect_to_issuer", 403]`: names, or statuses as numbers or strings.
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
            case .string(let t) where Int(t) != nil: status = Int(t)
            default:
                throw ConfigError(
                    key: key, line: item.line,
                    "each entry is \"invalid_token\", \"401\", \"redirect_to_issuer\" or an HTTP status such as 403")
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
