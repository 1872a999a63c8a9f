/// Temporary AWS credentials for an `aws-sigv4` credential with web identity: `AssumeRoleWithWebIdentity` at its STS
/// endpoint, through the token service (single flight, cached until the refresh margin before `Expiration`, shared
/// with the fleet, asked again after S3 refuses them).
extension AWSSigV4Kind: FetchedTokenKind {
    /// One set of temporary credentials serves every request of the credential.
    func tokenScope(for target: URLTarget) -> TokenScope {
        guard case .webIdentity(let w) = keys else { return .refused("credential '\(name)' has static keys") }
        return .named(w.endpoint)
    }

    /// `prefetch = true` keeps the credentials for the STS endpoint: one set serves every request.
    var prefetchTarget: URLTarget? {
        guard case .webIdentity(let w) = keys else { return nil }
        return HTTPURL.parse(w.endpoint)?.target
    }

    func fetchToken(
        _ c: Credential, root: String, isPortal: Bool, fetcher: TokenFetcher,
        done: @escaping (Result<IssuedToken, TokenError>) -> Void
    ) {
        guard case .webIdentity(let w) = keys else {
            done(.failure(TokenError(credential: c.name, message: "static AWS keys are not fetched", local: true)))
            return
        }
        fetcher.assumeRoleWithWebIdentity(c.name, w, done: done)
    }
}

extension TokenFetcher {
    func assumeRoleWithWebIdentity(
        _ credential: String, _ w: STSWebIdentity, done: @escaping (Result<IssuedToken, TokenError>) -> Void
    ) {
        // Read at every exchange: the projected token is rotated under the proxy (hourly on EKS).
        guard let text = readTextFile(w.tokenFile) else {
            done(
                .failure(
                    TokenError(
                        credential: credential,
                        message: "cannot read web_identity_token_file '\(w.tokenFile)': \(lastErrorString())",
                        local: true)))
            return
        }
        let token = String(text.trimmingWhitespace())
        guard !token.isEmpty else {
            done(
                .failure(
                    TokenError(
                        credential: credential, message: "web_identity_token_file '\(w.tokenFile)' is empty",
                        local: true
                    )))
            return
        }
        let url = w.endpoint
        let where_ = "STS \(Self.redacted(url))"
        let route: ParentRoute?
        switch parentRoute(url) {
        case .success(let r): route = r
        case .failure(let refusal):
            done(.failure(TokenError(credential: credential, message: "\(where_): \(refusal.message)")))
            return
        }
        let f = HTTPFetch(
            multi: multi, method: "POST", url: url, form: w.form(token: token), timeoutSeconds: timeoutSeconds,
            network: network(for: url), route: route
        ) { [self] result in
            switch result {
            case .failure(let err):
                done(.failure(TokenError(credential: credential, message: "\(where_) failed: \(err.message)")))
            case .success(let r):
                let now = clock.nowMillis()
                switch STSWebIdentity.classify(status: r.status, body: r.body) {
                case .credentials(let k, let expires):
                    // STS states the expiry by its clock: moved onto this one by the answer's `Date`.
                    let local = ServerClock.localExpiry(
                        expires: expires, serverDate: ServerClock.date(in: r.headers), now: now)
                    done(
                        .success(
                            IssuedToken(value: k.tokenValue, expires: local, issued: now, ssl: false, referer: nil)))
                case .refused(let code, let message):
                    var e = TokenError(
                        credential: credential,
                        message:
                            "\(where_) refused AssumeRoleWithWebIdentity: \(code)\(message.map { " (\($0))" } ?? "")",
                        details: STSWebIdentity.advice(code))
                    e.refused = true
                    e.loginRefused = true
                    done(.failure(e))
                case .outage(let why):
                    done(.failure(TokenError(credential: credential, message: "\(where_) answered \(why)")))
                }
            }
        }
        f.start()
    }
}
