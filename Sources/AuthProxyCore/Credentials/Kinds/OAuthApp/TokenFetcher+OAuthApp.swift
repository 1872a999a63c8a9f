/// `oauth-app`: the OAuth client-credentials grant at the portal.
extension TokenFetcher {
    func clientCredentials(
        _ c: Credential, _ o: OAuthAppSettings,
        done: @escaping (Result<IssuedToken, TokenError>) -> Void
    ) {
        var fields = [
            ("grant_type", "client_credentials"), ("client_id", o.clientID), ("client_secret", o.clientSecret),
        ]
        if let m = o.expirationMinutes { fields.append(("expiration", String(m))) }
        fields.append(("f", "json"))
        let url = ServerRoot.sharingRest(o.portalURL) + "/oauth2/token"
        post(c, url: url, fields: fields, answer: OAuthTokenResponse.self) { [self] result in
            done(result.flatMap { issued(c, $0, service: url) }.mapError(Self.loginRefused))
        }
    }
}
