/// Whether an upstream response head rejects the `oauth2` access token the proxy injected, per the credential's
/// `rejection` setting. The head alone decides (no body is held), so a credential whose upstream never rejects
/// costs nothing per response but this check.
///
/// `403` with `WWW-Authenticate: Bearer error="insufficient_scope"` (RFC 6750 §3.1) is never a rejection, whatever
/// is configured: the token is valid and lacks a permission, which a new token of the same grant will not have.
enum OAuth2Rejection {
    static func isRejection(
        status: Int, wwwAuthenticate: [String], location: String?, signals: Set<OAuth2Settings.RejectionSignal>,
        issuerHost: String?
    ) -> Bool {
        guard status >= 300 else { return false }
        let challenges = status == 401 || status == 403 ? AuthChallenge.parse(fields: wwwAuthenticate) : []
        let bearerError = challenges.first { $0.is("bearer") }?.parameter("error")
        if bearerError == "insufficient_scope" { return false }
        if signals.contains(.status(status)) { return true }
        if status == 401 {
            if signals.contains(.anyUnauthorized) { return true }
            if signals.contains(.invalidToken), bearerError == "invalid_token" { return true }
            if signals.contains(.iap), challenges.isEmpty { return true }
        }
        if signals.contains(.redirectToIssuer), [301, 302, 303, 307, 308].contains(status), let location,
            let issuerHost, let target = HTTPURL.parse(location)?.target
        {
            return isSignInHost(target.host, issuerHost: issuerHost)
        }
        return false
    }

    /// Whether a redirect to `host` is one to sign in at the provider of `issuerHost`: its own host, or for Google
    /// (whose token endpoint is `oauth2.googleapis.com`) `accounts.google.com`, where IAP sends a client without a
    /// valid ID token.
    static func isSignInHost(_ host: String, issuerHost: String) -> Bool {
        let h = host.lowercased()
        let issuer = issuerHost.lowercased()
        if h == issuer { return true }
        return h == "accounts.google.com" && (issuer == "oauth2.googleapis.com" || issuer == "www.googleapis.com")
    }
}
