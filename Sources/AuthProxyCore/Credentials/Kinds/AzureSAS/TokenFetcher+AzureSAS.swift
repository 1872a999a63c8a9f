/// Token requests of `azure-sas` credentials: a GET of the token endpoint URL the request's container filled in
/// (``AzureSASEndpoint``), with the subscription key when there is one, read by ``AzureSASAnswer``. Runs on the token
/// service's queue; caching, single flight and backoff are the token service's.
extension TokenFetcher {
    func azureSASToken(
        _ c: Credential, _ kind: AzureSASKind, tokenURL url: String,
        done: @escaping (Result<IssuedToken, TokenError>) -> Void
    ) {
        let endpoint = "SAS token endpoint \(Self.redacted(url))"
        let route: ParentRoute?
        switch parentRoute(url) {
        case .success(let r): route = r
        case .failure(let refusal):
            done(.failure(TokenError(credential: c.name, message: "\(endpoint): \(refusal.message)")))
            return
        }
        let headers = kind.subscriptionKey.map { [(AzureSASKind.subscriptionKeyField, $0)] } ?? []
        let f = HTTPFetch(
            multi: multi, method: "GET", url: url, form: nil, timeoutSeconds: timeoutSeconds,
            network: network(for: url), route: route, headers: headers
        ) { [self] result in
            switch result {
            case .failure(let err):
                done(.failure(TokenError(credential: c.name, message: "\(endpoint) failed: \(err.message)")))
            case .success(let r):
                let now = clock.nowMillis()
                switch AzureSASAnswer.classify(
                    status: r.status, body: r.body, serverDate: ServerClock.date(in: r.headers), now: now,
                    hasKey: kind.subscriptionKey != nil)
                {
                case .token(let t):
                    done(.success(t))
                case .keyRefused(let why):
                    var e = TokenError(
                        credential: c.name, message: "\(endpoint) \(why)",
                        details: [
                            "The token endpoint reads the key from the \(AzureSASKind.subscriptionKeyField) header: check subscription_key."
                        ])
                    e.refused = true
                    e.loginRefused = true
                    done(.failure(e))
                case .refused(let why):
                    var e = TokenError(
                        credential: c.name, message: "\(endpoint) \(why)",
                        details: [
                            "Check token_url (and collections, for a {collection} endpoint): the endpoint does not sign for this container or collection."
                        ])
                    e.refused = true
                    done(.failure(e))
                case .outage(let why):
                    var e = TokenError(credential: c.name, message: "\(endpoint) \(why)")
                    if r.status == 429 || r.status == 503,
                        let v = r.headers.first(where: { $0.name.caseInsensitiveEquals("retry-after") })?.value,
                        let s = RetryPolicy.retryAfterSeconds(
                            v, responseDate: ServerClock.date(in: r.headers), now: now)
                    {
                        e.retryAfter = Int64(s) * 1000
                    }
                    done(.failure(e))
                }
            }
        }
        f.start()
    }
}
