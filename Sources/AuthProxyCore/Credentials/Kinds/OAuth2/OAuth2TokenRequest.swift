import Foundation

/// The form and headers of one token request of an `oauth2` credential (RFC 6749 §4.4 and §6, RFC 7523 §2.2,
/// RFC 8707, RFC 8705 §2): pure, so each client authentication method is tested as a table.
struct OAuth2TokenRequest: Equatable {
    var fields: [(String, String)]
    var headers: [(String, String)]

    static let assertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

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
    }

    /// The request for `s` with `method`, as the running proxy makes it; `refreshToken` for the refresh-token grant
    /// (which an `authorization_code` credential uses after its sign-in).
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
        }
        if let scope = s.scope { fields.append(("scope", scope)) }
        if let audience = s.audience { fields.append(("audience", audience)) }
        if let resource = s.resource { fields.append(("resource", resource)) }
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
        case .tlsClientAuth, .none:
            fields.append(("client_id", s.clientID))
        }
        return OAuth2TokenRequest(fields: fields, headers: headers)
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
