import Foundation

/// The form and headers of one token request of an `oauth2` credential (RFC 6749 §4.4 and §6, RFC 7523 §2.1 and
/// §2.2, RFC 8693 §2.1, RFC 8707, RFC 8705 §2): pure, so each grant and client authentication method is tested as
/// a table.
struct OAuth2TokenRequest: Equatable {
    var fields: [(String, String)]
    var headers: [(String, String)]

    static let assertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
    static let tokenExchangeGrant = "urn:ietf:params:oauth:grant-type:token-exchange"

    /// What the client authentication carries, besides the settings.
    enum ClientProof: Equatable {
        /// Nothing beyond the settings (secret methods, `tls_client_auth`, `none`).
        case settings
        /// A signed or projected JWT for `client_assertion`.
        case assertion(String)
    }

    /// The grant a request makes.
    enum GrantFields: Equatable {
        case clientCredentials
        case refresh(String)
        /// `authproxy login`: the code the redirect carried, the redirect URI it went to and the PKCE verifier.
        case code(String, redirectURI: String, verifier: String)
        /// The signed jwt-bearer assertion (``JWTBearerGrant``): it carries the scope or target audience itself.
        case jwtBearer(assertion: String)
        /// RFC 8693: the subject token as read from its file now.
        case tokenExchange(subjectToken: String)
    }

    /// The request of the client-credentials or refresh-token grant for `s` with `method`; `refreshToken` for the
    /// refresh-token grant (which an `authorization_code` credential uses after its sign-in). The other grants
    /// carry what they were read or signed from: ``make(_:method:proof:grant:)``.
    static func make(
        _ s: OAuth2Settings, method: OAuth2Settings.AuthMethod, proof: ClientProof, refreshToken: String?
    ) -> OAuth2TokenRequest {
        make(
            s, method: method, proof: proof,
            grant: s.grant == .clientCredentials ? .clientCredentials : .refresh(refreshToken ?? ""))
    }

    static func make(
        _ s: OAuth2Settings, method: OAuth2Settings.AuthMethod, proof: ClientProof, grant: GrantFields
    ) -> OAuth2TokenRequest {
        var fields: [(String, String)] = []
        switch grant {
        case .clientCredentials:
            fields.append(("grant_type", "client_credentials"))
        case .refresh(let token):
            fields.append(("grant_type", "refresh_token"))
            fields.append(("refresh_token", token))
        case .code(let code, let redirectURI, let verifier):
            fields += [
                ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", redirectURI),
                ("code_verifier", verifier),
            ]
        case .jwtBearer(let assertion):
            fields += [("grant_type", JWTBearerGrant.grantType), ("assertion", assertion)]
        case .tokenExchange(let subject):
            fields += [
                ("grant_type", tokenExchangeGrant), ("subject_token", subject),
                ("subject_token_type", s.subjectTokenType),
            ]
            if let requested = s.requestedTokenType { fields.append(("requested_token_type", requested)) }
        }
        if case .jwtBearer = grant {
            // Google reads scope and audience from the assertion's claims only.
        } else {
            if let scope = s.scope { fields.append(("scope", scope)) }
            if let audience = s.audience { fields.append(("audience", audience)) }
            if let resource = s.resource { fields.append(("resource", resource)) }
        }
        var headers: [(String, String)] = []
        switch method {
        case .clientSecretBasic:
            // RFC 6749 §2.3.1: id and secret are form-encoded before they are joined, so a `:` in either survives.
            let pair =
                TokenInjection.percentEncoded(s.clientID) + ":" + TokenInjection.percentEncoded(s.clientSecret ?? "")
            headers.append(("Authorization", "Basic " + base64(Array(pair.utf8))))
        case .clientSecretPost:
            fields.append(("client_id", s.clientID))
            fields.append(("client_secret", s.clientSecret ?? ""))
        case .privateKeyJWT:
            fields.append(("client_id", s.clientID))
            if case .assertion(let jwt) = proof {
                fields.append(("client_assertion_type", assertionType))
                fields.append(("client_assertion", jwt))
            }
        case .tlsClientAuth:
            fields.append(("client_id", s.clientID))
        case .none:
            // A public client names itself; a jwt-bearer assertion names the client already, and a token exchange
            // without client_id (a workload identity pool) has no client to name.
            if !s.clientID.isEmpty, !isJWTBearer(grant) { fields.append(("client_id", s.clientID)) }
        }
        return OAuth2TokenRequest(fields: fields, headers: headers)
    }

    private static func isJWTBearer(_ g: GrantFields) -> Bool {
        if case .jwtBearer = g { return true }
        return false
    }

    static func == (a: Self, b: Self) -> Bool {
        a.fields.elementsEqual(b.fields, by: ==) && a.headers.elementsEqual(b.headers, by: ==)
    }

    /// Standard base64 with padding (for `Basic`).
    static func base64(_ bytes: [UInt8]) -> String {
        var s = Base64URL.encode(bytes).replacingOccurrences(of: "-", with: "+").replacingOccurrences(
            of: "_", with: "/")
        while s.utf8.count % 4 != 0 { s += "=" }
        return s
    }
}
