/// What the executor does with a request the proxy forwards, decided by ``RequestPlanner/plan(_:url:store:settings:into:)``
/// from the request, the credentials in scope and the configuration alone.
struct ForwardPlan: Equatable {
    /// Where the request goes: the client's URL, or its https form under `upgrade_to_https`.
    var upstreamURL: URLTarget
    var upgradedToHTTPS: Bool
    /// Password, Kerberos, client certificate and server trust for the upstream.
    var network: NetworkAuth
    /// The client's URL as credentials are matched on it (its path normalised), and the upstream's.
    var clientMatch: URLTarget
    var upstreamMatch: URLTarget
    /// The URLs whose credentials' `rate_limit` this request spends (made only when rate limits exist: an array
    /// per request showed in the relay's profile).
    var rateLimitTargets: [URLTarget] { [clientMatch, upstreamMatch] }
    /// How much of the request body is kept to send again (nil: it has none): for a kept-alive connection found
    /// dead or a multi-round-trip login, and more for a refreshable token's retry.
    var replayLimit: Int64?
    var token: TokenPlan
    /// Header fields a `header` credential sets (the service one's, then the gateway one's, which wins a name
    /// both set), replacing the client's fields of those names; and the credential named in the access log.
    var setHeaders: [HeaderField] = []
    var headerCredential: String? = nil
    /// An `oauth2` credential with `layer = "gateway"` (an identity-aware proxy in front of the service): its
    /// access token goes in together with the service credential's, and a rejection by the gateway refreshes it
    /// alone.
    var gatewayToken: TokenPlan = .none
    /// The parent proxies the request goes through (nil: direct; `no_proxy` and the route decided here).
    var parentRoute: ParentRoute? = nil
    /// The route depends on a PAC answer not known yet: nothing else in the plan is final; the executor asks
    /// (``ParentRouting/evaluate(scheme:host:port:then:)``) and plans again.
    var routePending = false

    /// The plan for forwarding to `url` as it is, with no credential: what ``RequestPlanner`` starts from.
    init(url: URLTarget) {
        upstreamURL = url
        upgradedToHTTPS = false
        network = NetworkAuth()
        clientMatch = url
        upstreamMatch = url
        replayLimit = nil
        token = .none
    }

    /// The token-type credential's part.
    enum TokenPlan: Equatable {
        /// No token goes into the request (none matches, the path is outside the ArcGIS APIs, or the client
        /// brings its own).
        case none
        /// A token of `credential` goes in at `site`. `collectForm`: the form body (of at most
        /// ``RequestPlanner/maxFormBytes``) is collected whole first and the token goes into it.
        case inject(Credential, site: TokenInjection.Site, collectForm: Bool)

        // A credential is one by its name within a configuration generation.
        static func == (a: TokenPlan, b: TokenPlan) -> Bool {
            switch (a, b) {
            case (.none, .none): return true
            case (.inject(let c1, let s1, let f1), .inject(let c2, let s2, let f2)):
                return c1.name == c2.name && s1 == s2 && f1 == f2
            default: return false
            }
        }
    }
}

/// What the planner decides instead of forwarding: a local answer.
struct PlannedAnswer: Equatable {
    var error: ErrorResponse
    var extraHeaders: String = ""
    /// The `authproxy_denied_total` reason it counts as, if any.
    var denied: MetricLabels.DeniedReason? = nil
}
