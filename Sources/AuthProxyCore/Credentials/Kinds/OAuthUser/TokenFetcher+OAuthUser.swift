/// `oauth-user`: the refresh-token grant with the refresh token of `authproxy login`, and its exchange for a new one.
extension TokenFetcher {
    func refreshGrant(
        _ c: Credential, _ o: OAuthUserSettings, retried: Bool = false,
        done: @escaping (Result<IssuedToken, TokenError>) -> Void
    ) {
        // The file is the authority on refresh tokens (`authproxy login` writes them, `signout` removes them):
        // the host looks at it before every refresh grant (rare), so a new login or a sign-out takes effect
        // at once.
        guard let refresh = host.refreshToken(for: c) else {
            done(
                .failure(
                    TokenError(
                        credential: c.name,
                        message: "no refresh token (not signed in yet, signed out, or the sign-in expired): "
                            + Self.signInAgain(c),
                        local: true)))
            return
        }
        let url = ServerRoot.sharingRest(o.portalURL) + "/oauth2/token"
        let fields = [
            ("grant_type", "refresh_token"), ("client_id", o.clientID), ("refresh_token", refresh), ("f", "json"),
        ]
        post(c, url: url, fields: fields, answer: OAuthTokenResponse.self) { [self] result in
            if case .success(let a) = result,
                let expires = OAuthTokenResponse.refreshExpiry(a.body.refreshTokenExpiresIn, now: clock.nowMillis())
            {
                // A portal that says how long the refresh token lives (or hands out a new one) keeps the stored
                // sign-in's expiry true, so the exchange is planned on the portal's word.
                host.refreshTokenRenewed(c, spent: refresh, refreshToken: a.body.refreshToken, expires: expires)
            }
            if case .failure(let e) = result, e.refused, !retried, host.refreshToken(for: c) != refresh {
                // The refresh token was exchanged while this grant was on its way (a portal may invalidate the old
                // one at once): the sign-in is fine, ask again with the new one.
                refreshGrant(c, o, retried: true, done: done)
                return
            }
            done(
                result.flatMap { issued(c, $0, service: url) }.mapError {
                    Self.loginRefused(Self.refreshRefused($0, c))
                })
        }
    }

    /// A refresh grant the portal refused: the refresh token from `authproxy login` expired (about two weeks
    /// after the sign-in), was revoked (sign-out elsewhere, "revoke all tokens", a password change) or belongs to
    /// another app. Nothing but a new sign-in helps, so the error says so, with the portal's own words. An outage
    /// (no answer, an error page) stays as it is: the same refresh token works again when the portal is back.
    static func refreshRefused(_ e: TokenError, _ c: Credential) -> TokenError {
        guard e.refused else { return e }
        var e = e
        e.message =
            "the portal no longer accepts the refresh token of the last `authproxy login` "
            + "(it expired or was revoked; \(e.message)): " + signInAgain(c)
        return e
    }

    static func signInAgain(_ c: Credential) -> String {
        "sign in again with `authproxy login --config <file> --credential \(c.name)`"
    }

    /// What `grant_type=exchange_refresh_token` returned: the new refresh token and when it expires (nil: never).
    struct ExchangedRefreshToken {
        var refreshToken: String
        var expires: Int64?
    }

    /// `grant_type=exchange_refresh_token` (`client_id`, `redirect_uri`, `refresh_token`): the portal swaps the
    /// sign-in's refresh token for a new one with a full life. A refusal (``TokenError/refused``) means the portal no
    /// longer accepts `refreshToken`; anything else is an outage. The access token that comes with it is not kept: the
    /// cache's own single flight obtains access tokens, and those of the sign-in stay valid.
    func exchangeRefreshToken(
        _ c: Credential, _ o: OAuthUserSettings, refreshToken: String,
        done: @escaping (Result<ExchangedRefreshToken, TokenError>) -> Void
    ) {
        let url = ServerRoot.sharingRest(o.portalURL) + "/oauth2/token"
        let fields = [
            ("grant_type", "exchange_refresh_token"), ("client_id", o.clientID), ("redirect_uri", o.redirectURI),
            ("refresh_token", refreshToken), ("f", "json"),
        ]
        post(c, url: url, fields: fields, answer: OAuthTokenResponse.self) { [self] result in
            done(
                result.flatMap { answer in
                    guard let r = answer.body.refreshToken, !r.isEmpty else {
                        return .failure(
                            TokenError(
                                credential: c.name,
                                message:
                                    "token service \(Self.redacted(url)) returned no refresh_token for the exchange"))
                    }
                    let expires = OAuthTokenResponse.refreshExpiry(
                        answer.body.refreshTokenExpiresIn, now: clock.nowMillis())
                    return .success(ExchangedRefreshToken(refreshToken: r, expires: expires))
                })
        }
    }
}
