/// `arcgis-token`: `generateToken` with the username and password (``PasswordLogin`` decides where), or the
/// portal's token exchanged for a federated server's.
extension TokenFetcher {
    func generateWithPassword(
        _ c: Credential, _ s: ArcGISTokenSettings, root: String, isPortal: Bool,
        done: @escaping (Result<IssuedToken, TokenError>) -> Void
    ) {
        let proceed: (ServerInfoResponse?) -> Void = { [self] info in
            switch PasswordLogin.plan(
                s, root: root, isPortal: isPortal, info: info, configured: TokenServiceTrust.configuredOrigins(c))
            {
            case .failure(let e):
                done(.failure(TokenError(credential: c.name, message: e.message)))
            case .success(.exchange(let portal)):
                // One password login at the portal serves every federated server root: its token is cached
                // under the portal's key, and renewed once if the portal refuses it as dead.
                exchangeWithPortalToken(c, portal: portal, root: root, renewed: false, done: done)
            case .success(.login(let tokenURL, let expiration)):
                var fields = [("username", s.username), ("password", s.password), ("client", s.client)]
                if let r = s.referer, s.client == "referer" { fields.append(("referer", r)) }
                if let m = expiration { fields.append(("expiration", String(m))) }
                fields.append(("f", "json"))
                post(c, url: tokenURL, fields: fields, answer: GenerateTokenResponse.self) { [self] result in
                    done(
                        result.flatMap { issued(c, $0, service: tokenURL) }.map { t in
                            var t = t
                            t.referer = s.client == "referer" ? s.referer : nil
                            return t
                        }.mapError(Self.loginRefused))
                }
            }
        }
        guard PasswordLogin.readsServerInfo(isPortal: isPortal) else {
            proceed(nil)
            return
        }
        serverInfo(c, root: root) { info in
            // With token_url set, a server without a readable rest/info still gets a token (not exchanged).
            if case .failure(let e) = info, s.tokenURL == nil {
                done(.failure(e))
                return
            }
            proceed(try? info.get())
        }
    }
}
