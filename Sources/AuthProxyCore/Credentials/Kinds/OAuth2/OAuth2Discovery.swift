import Foundation

/// An OpenID Connect discovery document (`<issuer>/.well-known/openid-configuration`), the members an `oauth2`
/// credential uses, and the checks it must pass before its token endpoint receives a client secret.
struct OAuth2Discovery: Sendable, Equatable {
    var issuer: String
    var tokenEndpoint: String
    /// `token_endpoint_auth_methods_supported` (nil: absent, which OIDC Discovery §3 reads as
    /// `client_secret_basic` only).
    var authMethodsSupported: [String]?
    /// `mtls_endpoint_aliases.token_endpoint` (RFC 8705 §5): where `tls_client_auth` requests go when the
    /// provider serves mutual TLS on another host.
    var mtlsTokenEndpoint: String?
    /// `authorization_endpoint`: where `authproxy login` sends the browser.
    var authorizationEndpoint: String?

    /// The URL of the discovery document of `issuer` (OIDC Discovery §4.1: appended to the issuer's path).
    static func documentURL(issuer: String) -> String {
        var base = issuer
        while base.hasSuffix("/") { base.removeLast() }
        return base + "/.well-known/openid-configuration"
    }

    /// Reads the document `body` fetched for `configuredIssuer`; the reason when it cannot be used: not JSON, no
    /// `token_endpoint`, an `issuer` that is not exactly the one configured (OIDC Discovery §4.3 — a document
    /// naming another issuer may be an attacker's or a mix-up), an `http://` token endpoint for an https
    /// issuer, or an `http://` `mtls_endpoint_aliases.token_endpoint` (for any issuer: mutual TLS needs TLS).
    static func parse(_ body: [UInt8], configuredIssuer: String) -> Result<OAuth2Discovery, OAuth2Problem> {
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] else {
            return .failure(OAuth2Problem("the discovery document is not a JSON object"))
        }
        guard let issuer = object["issuer"] as? String else {
            return .failure(OAuth2Problem("the discovery document has no issuer"))
        }
        guard issuer == configuredIssuer else {
            return .failure(
                OAuth2Problem(
                    "the discovery document names the issuer '\(issuer)', not '\(configuredIssuer)' as configured (they must be equal exactly)"
                ))
        }
        guard let token = object["token_endpoint"] as? String, let t = HTTPURL.parse(token) else {
            return .failure(OAuth2Problem("the discovery document has no http(s) token_endpoint"))
        }
        if configuredIssuer.lowercased().hasPrefix("https:"), t.target.scheme != "https" {
            return .failure(
                OAuth2Problem(
                    "the discovery document's token_endpoint \(TokenFetcher.redacted(token)) is not https, the issuer is"
                ))
        }
        var d = OAuth2Discovery(issuer: issuer, tokenEndpoint: token)
        d.authorizationEndpoint = (object["authorization_endpoint"] as? String).flatMap {
            HTTPURL.parse($0) != nil ? $0 : nil
        }
        d.authMethodsSupported = (object["token_endpoint_auth_methods_supported"] as? [Any])?.compactMap {
            $0 as? String
        }
        if let aliases = object["mtls_endpoint_aliases"] as? [String: Any],
            let m = aliases["token_endpoint"] as? String,
            let alias = HTTPURL.parse(m)
        {
            // Mutual TLS needs TLS: over http the token request (client id, refresh token or code) and the token
            // it brings back would travel in clear, with no client certificate, whatever the issuer's scheme.
            guard alias.target.scheme == "https" else {
                return .failure(
                    OAuth2Problem(
                        "the discovery document's mtls_endpoint_aliases.token_endpoint \(TokenFetcher.redacted(m)) is not https (mutual TLS needs it)"
                    ))
            }
            d.mtlsTokenEndpoint = m
        }
        return .success(d)
    }

    /// The client authentication to use: the configured one, else the best the provider supports (`supported`:
    /// discovery's list; nil without discovery, or when the document has none) among those the configuration
    /// can do — `private_key_jwt` with a key or an assertion file, `client_secret_basic` then `_post` with a secret,
    /// `none` for a public client. The reason when none fits.
    static func authMethod(
        configured: OAuth2Settings.AuthMethod?, supported: [String]?, hasSecret: Bool, hasAssertion: Bool
    ) -> Result<OAuth2Settings.AuthMethod, OAuth2Problem> {
        if let configured { return .success(configured) }
        var candidates: [OAuth2Settings.AuthMethod] = []
        if hasAssertion { candidates.append(.privateKeyJWT) }
        if hasSecret { candidates += [.clientSecretBasic, .clientSecretPost] }
        if !hasAssertion, !hasSecret { candidates.append(.none) }
        guard let supported else {
            return candidates.first.map { .success($0) }
                ?? .failure(OAuth2Problem("no client authentication is configured"))
        }
        if let m = candidates.first(where: { supported.contains($0.rawValue) }) { return .success(m) }
        let have = candidates.map(\.rawValue).joined(separator: ", ")
        return .failure(
            OAuth2Problem(
                "the provider supports \(supported.joined(separator: ", ")) for its token endpoint; the credential can do \(have): set token_endpoint_auth_method, or configure a client_secret or private_key it supports"
            ))
    }
}
