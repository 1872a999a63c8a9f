/// The settings of an `oauth2` credential: a generic OAuth 2.0 / OpenID Connect client (Keycloak, Entra ID, any
/// RFC 6749 token endpoint, Google's service accounts, an RFC 8693 token exchange) whose access token (or ID token) goes
/// on every matched request, whatever its path.
public struct OAuth2Settings: Sendable, Equatable {
    /// Where the token endpoint comes from.
    public enum Endpoint: Sendable, Equatable {
        /// OIDC discovery at `<issuer>/.well-known/openid-configuration`; the document's `issuer` must be this
        /// string exactly (OpenID Connect Discovery §4.3).
        case issuer(String)
        /// The token endpoint itself.
        case tokenURL(String)
    }

    /// How the token is asked for.
    public enum Grant: String, Sendable, CaseIterable {
        case clientCredentials = "client_credentials"
        /// A refresh token seeded in the configuration (rotated ones are kept in the state file).
        case refreshToken = "refresh_token"
        /// A sign-in with `authproxy login` (authorization code with PKCE) stores a refresh token in the state file;
        /// access tokens come from the refresh-token grant.
        case authorizationCode = "authorization_code"
        /// RFC 7523 §2.1: a JWT the proxy signs with a service account's key is the grant (Google's
        /// `urn:ietf:params:oauth:grant-type:jwt-bearer`): with `target_audience` Google answers an OIDC ID token for
        /// that audience (what Identity-Aware Proxy wants), with `scope` an access token.
        case jwtBearer = "jwt_bearer"
        /// RFC 8693: a token from elsewhere (`subject_token_file`: a Kubernetes projected token, a CI job's OIDC
        /// token) exchanged for an access token (workload identity federation, Keycloak).
        case tokenExchange = "token_exchange"
    }

    /// How the client authenticates at the token endpoint (RFC 6749 §2.3, OIDC Core §9, RFC 8705).
    public enum AuthMethod: String, Sendable, CaseIterable {
        case clientSecretBasic = "client_secret_basic"
        case clientSecretPost = "client_secret_post"
        case privateKeyJWT = "private_key_jwt"
        case tlsClientAuth = "tls_client_auth"
        /// Nothing but `client_id` (a public client with a refresh token).
        case none
    }

    /// The signature of a `private_key_jwt` assertion.
    public enum KeyAlgorithm: String, Sendable, CaseIterable {
        case rs256 = "RS256"
        case ps256 = "PS256"
        case es256 = "ES256"
    }

    /// Where the access token goes.
    public enum Placement: String, Sendable, CaseIterable {
        /// `Authorization: Bearer <token>` (RFC 6750 §2.1).
        case header
        /// `access_token=<token>` in the query (RFC 6750 §2.3; GeoServer and GeoNode accept it).
        case query
        /// `Proxy-Authorization: Bearer <token>`, end to end to the server: Google IAP reads its ID token there, so
        /// `Authorization` stays free for the service behind it (an ArcGIS bearer). The client's own
        /// `Proxy-Authorization` (to authproxy) is never forwarded; this one replaces it.
        case proxyAuthorization = "proxy-authorization"
    }

    /// Which token of the token endpoint's answer goes on requests.
    public enum TokenField: String, Sendable, CaseIterable {
        case accessToken = "access_token"
        /// The OIDC ID token (Google IAP wants one whose audience is its OAuth client id); its lifetime is its own
        /// `exp`, not the answer's `expires_in` (which, when present, is the access token's).
        case idToken = "id_token"
    }

    /// RFC 8693 §3's `urn:ietf:params:oauth:token-type:jwt`: the default `subject_token_type`.
    public static let jwtTokenType = "urn:ietf:params:oauth:token-type:jwt"

    /// An upstream answer that means "this access token is no good": refresh and retry once.
    public enum RejectionSignal: Sendable, Hashable {
        /// `401` with `WWW-Authenticate: Bearer error="invalid_token"` (RFC 6750 §3.1).
        case invalidToken
        /// Any `401`.
        case anyUnauthorized
        /// A `401` without a `WWW-Authenticate` challenge: Google IAP's own refusal of an ID token ("Invalid IAP
        /// credentials"); a service behind the gateway that answers 401 names its scheme, and is not mistaken for
        /// it.
        case iap
        /// A `302`/`303`/`307` whose `Location` is on the issuer's (or token endpoint's) host: a gateway sending
        /// the browser to sign in.
        case redirectToIssuer
        /// This status, whatever the head says.
        case status(Int)
    }

    public let endpoint: Endpoint
    /// The host of the provider's URL: a redirect there is a gateway sending the client to sign in (read once here,
    /// not per response).
    public let providerHost: String?
    public var clientID: String
    public var clientSecret: String?
    /// nil: chosen from discovery's `token_endpoint_auth_methods_supported` (see ``OAuth2Discovery``).
    public var authMethod: AuthMethod?
    /// PEM private key for `private_key_jwt`.
    public var privateKey: String?
    public var keyAlgorithm: KeyAlgorithm = .rs256
    public var kid: String?
    /// PEM certificate of `privateKey`: its SHA-256 thumbprint goes in the assertion's `x5t#S256` header.
    public var certificate: String?
    /// A JWT file (a projected workload-identity token) read again for every token request and sent as
    /// `client_assertion`.
    public var clientAssertionFile: String?
    public var scope: String?
    public var audience: String?
    public var resource: String?
    public var grant: Grant = .clientCredentials
    /// The seeded refresh token (grant `refresh_token`).
    public var refreshToken: String?
    /// Where `authproxy login` receives the code (grant `authorization_code`): a loopback `http://` URL or
    /// `urn:ietf:wg:oauth:2.0:oob` (the code is pasted).
    public var redirectURI: String?
    /// The authorization endpoint, when discovery does not give it.
    public var authorizationURL: String?
    public var placement: Placement = .header
    /// Grant `jwt_bearer`: the audience of the ID token asked for (Google: `target_audience`, IAP's OAuth client id).
    public var targetAudience: String?
    /// A Google service-account JSON key (`client_email`, `private_key`, `private_key_id`, `token_uri`): read again
    /// for every token request, like `private_key` (``ServiceAccountKey``).
    public var serviceAccountFile: String?
    public var tokenField: TokenField = .accessToken
    /// Grant `token_exchange`: the subject token's file, read again for every exchange (it is rotated under the
    /// proxy).
    public var subjectTokenFile: String?
    public var subjectTokenType: String = OAuth2Settings.jwtTokenType
    public var requestedTokenType: String?
    /// Seconds a token lives when neither `expires_in` nor the JWT's `exp` says.
    public var defaultLifetimeSeconds: Int = 300
    public var rejection: Set<RejectionSignal> = [.invalidToken]

    public init(endpoint: Endpoint, clientID: String) {
        self.endpoint = endpoint
        self.clientID = clientID
        switch endpoint {
        case .issuer(let u), .tokenURL(let u): providerHost = HTTPURL.parse(u)?.target.host
        }
    }

    /// The provider's URL as configured (issuer or token endpoint), for cache keys, messages and the status page.
    public var providerURL: String {
        switch endpoint {
        case .issuer(let s), .tokenURL(let s): return s
        }
    }

    /// Everything that changes which tokens the credential gets, secrets included (see
    /// ``Credential/identityMaterial``). Key and assertion files count by path: rotating their contents does not
    /// drop the tokens already issued.
    public var identityMaterial: String {
        let parts: [String] = [
            providerURL, clientID, clientSecret ?? "", authMethod?.rawValue ?? "", privateKey ?? "",
            keyAlgorithm.rawValue,
            kid ?? "", certificate ?? "", clientAssertionFile ?? "", scope ?? "", audience ?? "", resource ?? "",
            grant.rawValue, refreshToken ?? "", redirectURI ?? "", authorizationURL ?? "", targetAudience ?? "",
            serviceAccountFile ?? "", tokenField.rawValue, subjectTokenFile ?? "", subjectTokenType,
            requestedTokenType ?? "",
        ]
        return parts.joined(separator: "\u{0}")
    }
}
