import Foundation
import Logging

/// What a token request needs from the token cache around it. Called on the service queue.
protocol TokenFetcherHost: AnyObject {
    /// The portal's token for `c` (cached under `credential|portal root`, single flight like any other),
    /// obtained first when there is none.
    func portalToken(_ c: Credential, portal: String, done: @escaping (Result<IssuedToken, TokenError>) -> Void)
    /// The portal at `portal` refused its own `token` as dead (revoked or expired early): nobody may get it again.
    func dropToken(_ c: Credential, portal: String, token: IssuedToken)
    /// The refresh token of an `oauth-user` credential, as the state file has it now.
    func refreshToken(for c: Credential) -> String?
    /// An `oauth2` credential's provider rotated its refresh token: the new one replaces the old, in memory and in
    /// the state file, before anything else can spend the old one.
    func keepRotatedRefreshToken(_ c: Credential, _ value: String)
    /// The answer to an `oauth-user` refresh grant that spent `spent` said when the sign-in's refresh token expires
    /// (`refresh_token_expires_in`), and may have carried a new one (`refreshToken`): the stored sign-in follows.
    func refreshTokenRenewed(_ c: Credential, spent: String, refreshToken: String?, expires: Int64)
    /// The access token of an `oauth2` credential with `layer = "gateway"` (cached and single flight like any other),
    /// for the proxy's own requests behind that gateway.
    func gatewayToken(_ g: Credential, provider: String, done: @escaping (Result<IssuedToken, TokenError>) -> Void)
}

/// Asks token services for tokens, per credential type: ArcGIS `generateToken` with a password, the OAuth
/// client-credentials and refresh-token grants, the exchange of a portal token for a federated server's
/// token, and `rest/info` discovery of where a server gets its tokens.
///
/// It decides nothing about caching: ``TokenService`` calls ``fetch(_:root:isPortal:done:)`` when
/// ``TokenCache`` says a token request must start.
///
/// Ownership: created by ``TokenService`` and used only on its queue (the queue of `multi`), where every
/// completion runs.
final class TokenFetcher {
    let multi: CurlMulti
    /// `upstream_timeout_seconds` for every request it makes (set again by a configuration reload; confined to
    /// the queue).
    var timeoutSeconds: Int
    /// Network credentials (server trust above all) for the token service and `rest/info` requests.
    /// Network credentials for token requests (replaced by a configuration reload; confined to the queue).
    var store: CredentialStore
    /// The parent proxies token, `rest/info` and sign-in requests go through (nil: direct; replaced by a reload).
    var routing: ParentRouting? = nil
    let logger: Logger
    unowned let host: any TokenFetcherHost
    /// What `rest/info` reuse and the issue time of new tokens are measured on (the service's clock).
    let clock: any WallClock
    /// OIDC discovery documents of `oauth2` credentials, by issuer (see `TokenFetcher+OAuth2.swift`).
    var discoveries: [String: (document: OAuth2Discovery, fetchedAt: Int64)] = [:]
    /// `rest/info` answers by normalized server root, with the requests waiting for one.
    private var infos: [String: InfoEntry] = [:]

    /// How long a `rest/info` answer is reused.
    static let infoLifetime: Int64 = 10 * 60 * 1000

    private struct InfoEntry {
        var info: ServerInfoResponse?
        var fetchedAt: Int64 = 0
        var waiters: [(Result<ServerInfoResponse, InfoFailure>) -> Void] = []
    }

    /// A `rest/info` that could not be read: whether anything answered (a 404, an error object, an HTML page)
    /// or nothing did (refused, timeout), which may be transient.
    private struct InfoFailure: Error {
        var error: TokenError
        var answered: Bool
    }

    init(
        multi: CurlMulti, timeoutSeconds: Int, store: CredentialStore, logger: Logger, host: any TokenFetcherHost,
        clock: any WallClock = SystemWallClock()
    ) {
        self.multi = multi
        self.clock = clock
        self.timeoutSeconds = timeoutSeconds
        self.store = store
        self.logger = logger
        self.host = host
    }

    /// Obtains a new token for `c` at `root` (a portal root when `isPortal`).
    func fetch(_ c: Credential, root: String, isPortal: Bool, done: @escaping (Result<IssuedToken, TokenError>) -> Void)
    {
        guard let k = c.kind as? any FetchedTokenKind else {
            done(.failure(TokenError(credential: c.name, message: "not a refreshable credential")))
            return
        }
        k.fetchToken(c, root: root, isPortal: isPortal, fetcher: self, done: done)
    }

    func network(for url: String) -> NetworkAuth {
        HTTPURL.parse(url).map { store.network(for: $0.target) } ?? NetworkAuth()
    }

    /// `url` as the proxy's own request for credential `c` goes there, with the fields a `layer = "gateway"`
    /// credential in front of it adds: an identity-aware proxy guards `rest/info` and `generateToken` as it guards
    /// the services. An `oauth2` gateway's token is obtained first; its failure fails the fetch, naming it.
    func throughGateway(
        _ url: String, for c: Credential,
        then: @escaping (Result<(url: String, fields: [(String, String)]), TokenError>) -> Void
    ) {
        guard let target = HTTPURL.parse(url)?.target, let g = store.gatewayCredential(for: target), g.name != c.name
        else {
            then(.success((url, [])))
            return
        }
        // The gateway's own kind applies it, as on the requests it guards (its token first, when it has one).
        func applied(_ token: IssuedToken?) -> (url: String, fields: [(String, String)]) {
            var r = OutgoingRequest(
                method: "POST", target: target, fields: HTTPHeaders(), body: nil, bodyLength: nil, isUpgrade: false,
                now: clock.nowMillis(), credential: g.name, placement: g.placement)
            r.layer = .gateway
            _ = g.kind.apply(token, to: &r)
            return (r.target.url, r.fields.map { ($0.name, $0.value) })
        }
        guard let k = g.kind as? any FetchedTokenKind, case .named(let provider) = k.tokenScope(for: target) else {
            then(.success(applied(nil)))
            return
        }
        host.gatewayToken(g, provider: provider) { result in
            switch result {
            case .failure(let e):
                var error = TokenError(
                    credential: c.name,
                    message:
                        "the gateway credential '\(g.name)' in front of \(Self.redacted(url)) has no token: \(e.message)",
                    details: e.details)
                error.local = true
                then(.failure(error))
            case .success(let t):
                then(.success(applied(t)))
            }
        }
    }

    // MARK: - per credential type

    /// A server root under an OAuth credential: the portal token, exchanged for a server token when the server
    /// says it is federated with that portal.
    ///
    /// When the portal refuses the exchange because the portal token itself is dead (revoked or expired early:
    /// a portal restart, a password change, "revoke all tokens"), the portal token is dropped, a new one
    /// obtained as the credential's type dictates, and the exchange made once more — all for the request
    /// that is waiting, which then gets its retry instead of a 502.
    func viaPortal(
        _ c: Credential, portal: String, root: String,
        done: @escaping (Result<IssuedToken, TokenError>) -> Void
    ) {
        serverInfo(c, root: root) { [self] info in
            guard case .success(let i) = info, let owner = i.owningSystemURL, ServerRoot.same(owner, portal) else {
                // Not federated (e.g. hosted services): the portal token is used as is.
                host.portalToken(c, portal: portal, done: done)
                return
            }
            exchangeWithPortalToken(c, portal: portal, root: root, renewed: false, done: done)
        }
    }

    func exchangeWithPortalToken(
        _ c: Credential, portal: String, root: String, renewed: Bool,
        done: @escaping (Result<IssuedToken, TokenError>) -> Void
    ) {
        host.portalToken(c, portal: portal) { [self] portalResult in
            switch portalResult {
            case .failure(let e): done(.failure(e))
            case .success(let portalToken):
                exchange(c, portalToken: portalToken, portal: portal, serverRoot: root) { [self] result in
                    guard case .failure(let e) = result, e.tokenRejected else {
                        done(result)
                        return
                    }
                    host.dropToken(c, portal: portal, token: portalToken)
                    if renewed {
                        done(result)  // a brand-new portal token refused as well: report, do not loop
                        return
                    }
                    logger.info(
                        "the portal refused its own token for the exchange: getting a new portal token",
                        metadata: ["credential": "\(c.name)", "portal": "\(portal)", "root": "\(root)"])
                    exchangeWithPortalToken(c, portal: portal, root: root, renewed: true, done: done)
                }
            }
        }
    }

    /// A token service's refusal of the credential's own secret (password, client secret, refresh token) is
    /// the credential's failure, not one root's: ``TokenCache`` backs off the whole credential, so roots asked
    /// for meanwhile cost no further failed login (account lockout). An outage stays a failure of the root.
    static func loginRefused(_ e: TokenError) -> TokenError {
        guard e.refused else { return e }
        var e = e
        e.loginRefused = true
        return e
    }

    /// Federation: a portal token → a token for `serverRoot` (portal `generateToken` with `token` + `serverUrl`).
    private func exchange(
        _ c: Credential, portalToken: IssuedToken, portal: String, serverRoot: String,
        done: @escaping (Result<IssuedToken, TokenError>) -> Void
    ) {
        let url = ServerRoot.sharingRest(portal) + "/generateToken"
        // The server token is bound as the credential's tokens are (a referer-bound portal token would otherwise
        // hand down nothing for an OAuth credential, or the portal's idea of the caller's address).
        let binding = TokenBinding.of(c)
        let fields =
            [("token", portalToken.value), ("serverUrl", serverRoot)] + (binding?.exchangeFields ?? []) + [
                ("f", "json")
            ]
        // The portal token travels in this request: bound to a referer, it needs that Referer here as anywhere.
        let headers = portalToken.referer.map { [("Referer", $0)] } ?? []
        post(c, url: url, fields: fields, headers: headers, answer: GenerateTokenResponse.self) { [self] result in
            done(
                result.flatMap { issued(c, $0, service: url) }.map { t in
                    var t = t
                    t.referer = binding?.referer ?? portalToken.referer
                    return t
                })
        }
    }

    // MARK: - rest/info discovery

    /// The `rest/info` of the server at `root`: one request at a time per server, answers reused for
    /// ``infoLifetime``.
    func serverInfo(
        _ c: Credential, root: String,
        done: @escaping (Result<ServerInfoResponse, TokenError>) -> Void
    ) {
        info(c, root: root, url: root + "/rest/info?f=json") { done($0.mapError(\.error)) }
    }

    /// Whether `root` (a portal root when `isPortal`) is an ArcGIS root, from its `rest/info` (a portal's
    /// `sharing/rest/info`): what ``RootConfirmations`` needs before a password is spent on a root a client's
    /// path named. A server's answer is kept for the token request that follows (one `rest/info` request).
    func probeRoot(
        _ c: Credential, root: String, isPortal: Bool,
        done: @escaping (RootConfirmations<TokenService.Completion>.Verdict) -> Void
    ) {
        let url = isPortal ? ServerRoot.sharingRest(root) + "/info?f=json" : root + "/rest/info?f=json"
        info(c, root: root, url: url) { result in
            switch result {
            case .success(let i) where i.describesRoot:
                done(.root)
            case .success:
                done(.notARoot(reason: "\(Self.redacted(url)) answered without ArcGIS server information"))
            case .failure(let f):
                done(f.answered ? .notARoot(reason: f.error.message) : .unreachable(reason: f.error.message))
            }
        }
    }

    /// The information document at `url` (of the root `root`): one request at a time per URL, answers reused
    /// for ``infoLifetime``.
    private func info(
        _ c: Credential, root: String, url: String,
        done: @escaping (Result<ServerInfoResponse, InfoFailure>) -> Void
    ) {
        let key = ServerRoot.normalized(url)
        var e = infos[key] ?? InfoEntry()
        if let info = e.info, clock.nowMillis() - e.fetchedAt < Self.infoLifetime {
            done(.success(info))
            return
        }
        e.waiters.append(done)
        infos[key] = e
        guard e.waiters.count == 1 else { return }
        let route: ParentRoute?
        switch parentRoute(url) {
        case .success(let r): route = r
        case .failure(let refusal):
            infos[key] = nil
            let failure = InfoFailure(
                error: TokenError(credential: c.name, message: "cannot read \(Self.redacted(url)): \(refusal.message)"),
                answered: false)
            for w in e.waiters { w(.failure(failure)) }
            return
        }
        throughGateway(url, for: c) { [self] gateway in
            switch gateway {
            case .failure(let error):
                let e = infos[key] ?? InfoEntry()
                infos[key] = nil
                for w in e.waiters { w(.failure(InfoFailure(error: error, answered: false))) }
            case .success(let sent):
                fetchInfo(c, url: url, key: key, sent: sent, route: route)
            }
        }
    }

    private func fetchInfo(
        _ c: Credential, url: String, key: String, sent: (url: String, fields: [(String, String)]), route: ParentRoute?
    ) {
        let f = HTTPFetch(
            multi: multi, method: "GET", url: sent.url, form: nil, timeoutSeconds: timeoutSeconds,
            network: network(for: url), route: route, headers: sent.fields
        ) { [self] result in
            var e = infos[key] ?? InfoEntry()
            let waiters = e.waiters
            e.waiters = []
            let outcome: Result<ServerInfoResponse, InfoFailure>
            let where_ = Self.redacted(url)
            switch result {
            case .failure(let err):
                outcome = .failure(
                    InfoFailure(
                        error: TokenError(credential: c.name, message: "cannot read \(where_): \(err.message)"),
                        answered: false))
            case .success(let r):
                if let info = try? JSONDecoder().decode(ServerInfoResponse.self, from: Data(r.body)) {
                    e.info = info
                    e.fetchedAt = clock.nowMillis()
                    outcome = .success(info)
                } else {
                    outcome = .failure(
                        InfoFailure(
                            error: TokenError(
                                credential: c.name,
                                message: "\(where_) answered HTTP \(r.status) without server information"),
                            answered: true))
                }
            }
            // Only answers are kept: a failed URL takes no entry (a client naming invented roots must not grow
            // this table; ``RootConfirmations`` remembers refusals, bounded).
            infos[key] = e.info == nil ? nil : e
            for w in waiters { w(outcome) }
        }
        f.captureCredential = c.name
        f.start()
    }

    /// The parents for a fetch of `url`. This queue may wait for the PAC file's answer (it is no event loop);
    /// with no PAC file loaded the fetch fails as client requests do, instead of going direct.
    func parentRoute(_ url: String) -> Result<ParentRoute?, ErrorResponse> {
        guard let routing else { return .success(nil) }
        return routing.routeWaiting(url: url)
    }

    // MARK: - token service calls

    /// POSTs `fields` to the token service at `url` and reads its answer as `Body`; a refusal in any shape
    /// (``TokenServiceReply``) is a failure naming the service and its message.
    func post<Body: Decodable>(
        _ c: Credential, url: String, fields: [(String, String)], headers: [(String, String)] = [],
        answer: Body.Type, done: @escaping (Result<Answer<Body>, TokenError>) -> Void
    ) {
        let route: ParentRoute?
        switch parentRoute(url) {
        case .success(let r): route = r
        case .failure(let refusal):
            done(
                .failure(
                    TokenError(
                        credential: c.name, message: "token service \(Self.redacted(url)) failed: \(refusal.message)")))
            return
        }
        throughGateway(url, for: c) { [self] gateway in
            switch gateway {
            case .failure(let error): done(.failure(error))
            case .success(var sent):
                sent.fields += headers
                post(c, url: url, sent: sent, route: route, fields: fields, done: done)
            }
        }
    }

    func post<Body: Decodable>(
        _ c: Credential, url: String, sent: (url: String, fields: [(String, String)]), route: ParentRoute?,
        fields: [(String, String)], done: @escaping (Result<Answer<Body>, TokenError>) -> Void
    ) {
        let f = HTTPFetch(
            multi: multi, method: "POST", url: sent.url, form: fields, timeoutSeconds: timeoutSeconds,
            network: network(for: url), route: route, headers: sent.fields
        ) { result in
            switch result {
            case .failure(let err):
                done(
                    .failure(
                        TokenError(
                            credential: c.name, message: "token service \(Self.redacted(url)) failed: \(err.message)")))
            case .success(let r):
                switch try? JSONDecoder().decode(TokenServiceReply<Body>.self, from: Data(r.body)) {
                case nil:
                    done(
                        .failure(
                            TokenError(
                                credential: c.name,
                                message: "token service \(Self.redacted(url)) answered HTTP \(r.status) without JSON")))
                case .refused(let refusal):
                    var failure = TokenError(
                        credential: c.name,
                        message: "token service \(Self.redacted(url)) refused: \(refusal.message)",
                        details: refusal.details)
                    failure.tokenRejected = refusal.rejectsToken
                    failure.refused = true
                    done(.failure(failure))
                case .answered(let body):
                    done(.success(Answer(body: body, serverDate: ServerClock.date(in: r.headers))))
                }
            }
        }
        f.captureCredential = c.name
        f.start()
    }

    /// A token service's answer, with the `Date` of the response that carried it (the server's clock).
    struct Answer<Body> {
        var body: Body
        var serverDate: Int64?
    }

    func issued(_ c: Credential, _ answer: Answer<GenerateTokenResponse>, service: String) -> Result<
        IssuedToken, TokenError
    > {
        guard let t = answer.body.issuedToken(at: clock.nowMillis(), serverDate: answer.serverDate) else {
            return .failure(
                TokenError(credential: c.name, message: "token service \(Self.redacted(service)) returned no token"))
        }
        return Self.sendable(t, c, service: service)
    }

    func issued(_ c: Credential, _ answer: Answer<OAuthTokenResponse>, service: String) -> Result<
        IssuedToken, TokenError
    > {
        // expires_in is relative: no clock to correct.
        guard let t = answer.body.issuedToken(at: clock.nowMillis()) else {
            return .failure(
                TokenError(
                    credential: c.name,
                    message: "token service \(Self.redacted(service)) returned no access_token"))
        }
        return Self.sendable(t, c, service: service)
    }

    /// `t` when it may go into a request (``TokenSyntax``); otherwise the failure an answer without a token gives
    /// (the credential backs off), naming the token service and what is wrong, never the value.
    static func sendable(_ t: IssuedToken, _ c: Credential, service: String) -> Result<IssuedToken, TokenError> {
        guard let why = TokenSyntax.arcgisProblem(t.value) else { return .success(t) }
        return .failure(
            TokenError(
                credential: c.name,
                message: "token service \(redacted(service)) returned a token that cannot be sent: \(why)"))
    }

    /// A URL without its query string, for messages.
    static func redacted(_ url: String) -> String { String(url.prefix { $0 != "?" }) }
}
