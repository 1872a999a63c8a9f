/// The assertion of the jwt-bearer grant (RFC 7523 §2.1 and §3) as Google's token endpoint takes it from a service
/// account: `iss` = `sub` = the account's email, `aud` = the token endpoint, `iat`/`exp`, and what is asked for —
/// `target_audience` for an OIDC ID token of that audience (IAP's OAuth client id), or `scope` for an access
/// token. Pure: header and claims as JSON; signing is ``JWTSigningKey``'s.
enum JWTBearerGrant {
    static let grantType = "urn:ietf:params:oauth:grant-type:jwt-bearer"
    /// Google accepts up to an hour; a short one is of little use to whoever copies it.
    static let lifetimeSeconds: Int64 = 300

    /// `{"alg":…,"typ":"JWT"[,"kid":…]}`: RS256 with a service-account key, whose `private_key_id` is the kid.
    static func header(alg: OAuth2Settings.KeyAlgorithm, kid: String?) -> String {
        ClientAssertionJWT.header(alg: alg, kid: kid, x5tS256: nil)
    }

    static func claims(
        issuer: String, audience: String, targetAudience: String?, scope: String?, issuedAt: Int64
    ) -> String {
        var members = [
            "\"iss\":\(ClientAssertionJWT.json(issuer))", "\"sub\":\(ClientAssertionJWT.json(issuer))",
            "\"aud\":\(ClientAssertionJWT.json(audience))",
        ]
        if let targetAudience { members.append("\"target_audience\":\(ClientAssertionJWT.json(targetAudience))") }
        if let scope { members.append("\"scope\":\(ClientAssertionJWT.json(scope))") }
        members.append("\"iat\":\(issuedAt)")
        members.append("\"exp\":\(issuedAt + lifetimeSeconds)")
        return "{" + members.joined(separator: ",") + "}"
    }
}
