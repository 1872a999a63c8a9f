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
    /// The service layer's token-type credential that applies (nil: none matches, it does not apply to this
    /// request, or the client brings its own). Its kind applies it at one point, on the request as it goes
    /// upstream (``CredentialKind/apply(_:to:)``).
    var service: Credential? = nil
    /// The request body is held whole before the service credential applies (``Preparation/holdsBodyUpTo``: a
    /// form a token goes into, a body whose hash is signed).
    var holdsBody = false
    /// A print job to a print service some credential lists (``PrintRequest``): its web map gets the layers' tokens
    /// before it goes (a form body is then held whole: ``holdsBody``); nil: no print job.
    var print: PrintRequest.Decision? = nil
    /// The gateway layer's credential (an identity-aware proxy in front of the service): it applies after the
    /// service's, and a rejection by the gateway refreshes its token alone.
    var gateway: Credential? = nil
    /// The parent proxies the request goes through (nil: direct; `no_proxy` and the route decided here).
    var parentRoute: ParentRoute? = nil
    /// Which client carries the request (``UpstreamClient/choose(configured:network:route:upstreamScheme:isUpgrade:)``).
    var client: UpstreamClient = .own
    /// The request goes over upstream connections of the client connection's own, not the shared pool: a client
    /// doing NTLM or Negotiate itself authenticates the connection its request goes over, which must then never
    /// carry anyone else's request (``ConnectionBoundAuthentication``, ``OwnUpstreams``). Once a client connection
    /// has its own, all its later requests use them.
    var ownConnections = false
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
    }

    // A credential is one by its name within a configuration generation.
    static func == (a: ForwardPlan, b: ForwardPlan) -> Bool {
        a.upstreamURL == b.upstreamURL && a.upgradedToHTTPS == b.upgradedToHTTPS && a.network == b.network
            && a.clientMatch == b.clientMatch && a.upstreamMatch == b.upstreamMatch && a.replayLimit == b.replayLimit
            && a.service?.name == b.service?.name && a.holdsBody == b.holdsBody && a.gateway?.name == b.gateway?.name
            && a.parentRoute == b.parentRoute && a.client == b.client && a.routePending == b.routePending
            && a.print == b.print
    }
}

/// What the planner decides instead of forwarding: a local answer.
struct PlannedAnswer: Equatable {
    var error: ErrorResponse
    var extraHeaders: String = ""
    /// The `authproxy_denied_total` reason it counts as, if any.
    var denied: MetricLabels.DeniedReason? = nil
}
