/// The bytes and resources of one exchange on a ``ClientConnection``: the parsed request, the libcurl transfer,
/// the body and response buffers, the credential and token applied, the URLs. Its lifecycle is the
/// ``ExchangeStateMachine``'s; this only holds what the connection needs while carrying it out.
///
/// **Why an object of its own, and why pooled.** Kept inline, these fields made every `ClientConnection` ~920
/// bytes larger for its whole life, idle or not (docs/BENCHMARKS.md: ≤ 2 kB per idle keep-alive connection). A connection
/// holds one only while an exchange runs: it takes one from its loop's ``ReusePool`` when a request head arrives
/// (``ClientConnection/begin(_:)``) and gives it back, reset, when the exchange ends (``reset()``), so no
/// allocation is added per request: a loop reuses as many as it has exchanges in flight. The alternative of
/// keeping it on the connection until the one-second idle sweep was not chosen: after a burst over many
/// connections, every one of them would hold one for up to a second, and the freed objects would leave as many
/// holes in the heap, which malloc keeps resident (measured in `docs/BENCHMARKS.md`). Buffers keep their
/// capacity between uses up to ``keptCapacity``, so a busy loop does not grow them again for every exchange;
/// the pool itself is trimmed by the loop's sweep (``ReusePool/trim()``).
///
/// Confined to the loop queue of the connection using it.
final class ExchangeContext {
    /// Buffer capacity a pooled context keeps (larger buffers are freed when the exchange ends).
    static let keptCapacity = 64 * 1024

    /// The configuration generation the exchange began with, kept until it ends even if a reload installs a
    /// newer one meanwhile (set by ``ClientConnection/attachExchange()``).
    var context: ServerContext? = nil
    var head: RequestHead? = nil
    var transfer: (any UpstreamExchange)? = nil
    var bodyRemaining: Int64 = 0
    var chunkDecoder: ChunkedDecoder? = nil
    /// Request-body bytes waiting for libcurl.
    var bodyBuffer = ByteBuffer()
    var bodyBytesIn: Int64 = 0
    var bodyBytesOut: Int64 = 0
    /// The upstream response head being read, as bytes (1xx and challenge heads are replaced by the next one).
    var responseHead = ResponseHeadAssembler(capacity: 0)
    /// The committed response head, waiting to go out with the first body bytes or at the end (empty: none).
    var heldHead = ByteBuffer()
    /// Body bytes held with the head while looking for a token error.
    var sniffBuffer: [UInt8] = []
    /// The browser origin a `/proxy` exchange answers to (CORS), nil otherwise.
    var corsOrigin: String? = nil
    /// A `/proxy` exchange, whose answers all say `Vary: Origin` (``ResponseHeadAssembler/Options/varyOrigin``).
    var varyOrigin = false
    /// The connection's credential store while a `/proxy` request of an `[[app]]` uses the app's instead: put back
    /// when the exchange ends.
    @exclusivity(unchecked) var savedCredentials: CredentialStore? = nil
    /// A `/proxy` exchange of an `[[app]]` that requires sign-in: its answers say `Vary: Origin, Authorization`.
    @exclusivity(unchecked) var varyAuthorization = false
    /// The token-type credential applied to the exchange, and the token injected.
    var credential: Credential? = nil
    var injectedToken: IssuedToken? = nil
    /// The upstream answered `injectedToken` with a token error that was relayed (not retried): the response
    /// does not prove the token good.
    var injectedTokenRejected = false
    /// The gateway layer's `oauth2` credential (``ForwardPlan/gatewayToken``) and the token injected for it, which
    /// goes in with the service credential's; whether the response relayed rejected it.
    var gatewayCredential: Credential? = nil {
        didSet { stacksGateway = gatewayCredential != nil }
    }
    /// A gateway credential applies (every request reads this flag, not the optional struct).
    private(set) var stacksGateway = false
    var gatewayToken: IssuedToken? = nil
    var gatewayTokenRejected = false
    /// Each layer's token is refreshed and the request retried at most once per exchange.
    var serviceTokenRetried = false
    var gatewayTokenRetried = false
    /// Whether the response is inspected for the service token's rejection (the gateway's is read from every
    /// response head while its token is injected).
    var inspectsService = false
    /// Whether response bodies are scrubbed of the applied credentials' secrets (`scrub_responses`, else the
    /// kind's ``CredentialKind/scrubsResponseBodiesByDefault``): decided where the credentials apply, read for the
    /// response.
    var scrubsBodies = false
    /// The body scrub of the response being relayed (``BodyScrub``): for a scrubbing credential, and for the body of a
    /// redirect (whose HTML repeats its URL); nil: the body is relayed as it comes, at no cost per byte.
    var bodyScrub: BodyScrub? = nil
    var tokenSite: TokenInjection.Site = .query
    /// A copy of the streamed request body for the retry; `replayOffset` is how much of it the current
    /// transfer has read.
    var replay: ReplayBuffer? = nil
    var replayOffset: Int64 = 0
    /// An urlencoded form body collected whole (to put the token into it), and how much was sent.
    var formBody: [UInt8]? = nil
    var formOffset = 0
    /// The layer tokens put into a print job's web map (``PrintRequest``): masked in the response, head and body, as
    /// the print service may echo the web map; and the `Referer` the print request carries for them (nil: none).
    @exclusivity(unchecked) var printSecrets: [String] = []
    @exclusivity(unchecked) var printReferer: String? = nil
    var originalURL: URLTarget? = nil
    /// The planner's decision for the request (``RequestPlanner``), kept whole rather than copied field by field:
    /// set by ``ClientConnection/forward(_:)`` once the route is known; nil until then, and for a request the proxy
    /// answers itself.
    var plan: ForwardPlan? = nil
    /// Where the request goes: the client's URL, or its https form under `upgrade_to_https`.
    var upstreamURL: URLTarget? { plan?.upstreamURL }
    /// `upgrade_to_https` applied (the response head then gets its redirects written back to http).
    var upgradedToHTTPS: Bool { plan?.upgradedToHTTPS ?? false }
    /// Network-type credentials for the exchange (matched on the upstream URL, then the client's).
    var networkAuth: NetworkAuth { plan?.network ?? Self.noNetworkAuth }
    private static let noNetworkAuth = NetworkAuth()
    /// The parent proxies the exchange goes through (nil: direct).
    var parentRoute: ParentRoute? { plan?.parentRoute }
    /// The client that carries the exchange upstream (``ForwardPlan/client``).
    var client: UpstreamClient { plan?.client ?? .own }
    /// Fields `header` credentials set on the request (``ForwardPlan/setHeaders``), and their name(s) for the log.
    var setHeaders: [HeaderField] = []
    var headerCredential: String? = nil
    /// When the current upstream transfer started (for the time-to-first-byte metric).
    var upstreamStarted: UInt64 = 0
    /// The upstream challenged with 401 and the network credential answered: the scheme it offered that the
    /// credential uses (for `authproxy_network_auth_total`); nil: no challenge seen.
    var challengeScheme: String? = nil
    /// A retry with a fresh token is under way (or ended): its credential, and its result once known
    /// (`rejected` again, `token_failure`); nil result: decided by the final status.
    var retry: (credential: String, result: String?)? = nil
    /// The credential whose `rate_limit` refused the request (its metrics label).
    var limitedBy: String? = nil
    /// Concurrency-cap slots held while the exchange has upstream requests open (given back when dropped), and its
    /// place in a cap's queue while it waits (``UpstreamLimiter``).
    @exclusivity(unchecked) var upstreamSlots: [UpstreamSlot] = []
    @exclusivity(unchecked) var queuedWait: QueuedWait? = nil
    /// The attempt in progress (or the last one): what it sends, by which client, whether it may be sent again
    /// and as a `GET` or a `POST` form.
    var attempt: ForwardAttempt? = nil
    /// The cause of the upstream retry in progress, until its outcome is counted
    /// (`authproxy_upstream_retries_total`).
    var retryCause: RetryPolicy.Cause? = nil
    /// The upstream attempt being recorded while a capture runs for the exchange's credential (nil otherwise).
    @exclusivity(unchecked) var capture: CaptureDraft? = nil
    /// The exchange's spans, when tracing is on (``ExchangeTrace``); nil otherwise, and then nothing else of
    /// tracing runs for the exchange.
    @exclusivity(unchecked) var trace: ExchangeTrace? = nil

    init() {}

    /// Back to the state of a new context, for the next exchange (buffers keep up to ``keptCapacity``). A
    /// transfer still running here would call back into an exchange that has ended: it is cancelled.
    func reset() {
        if let t = transfer {
            assertionFailure("an exchange ended with its transfer still running")
            t.cancel()
            transfer = nil
        }
        context = nil
        head = nil
        bodyRemaining = 0
        chunkDecoder = nil
        if bodyBuffer.capacity > Self.keptCapacity { bodyBuffer.releaseStorage() } else { bodyBuffer.removeAll() }
        bodyBytesIn = 0
        bodyBytesOut = 0
        responseHead.reset(keepingCapacity: responseHead.retainedBytes <= Self.keptCapacity)
        if heldHead.capacity > Self.keptCapacity { heldHead.releaseStorage() } else { heldHead.removeAll() }
        sniffBuffer = []
        corsOrigin = nil
        varyOrigin = false
        savedCredentials = nil
        varyAuthorization = false
        credential = nil
        injectedToken = nil
        injectedTokenRejected = false
        gatewayCredential = nil
        gatewayToken = nil
        gatewayTokenRejected = false
        serviceTokenRetried = false
        gatewayTokenRetried = false
        inspectsService = false
        scrubsBodies = false
        bodyScrub = nil
        tokenSite = .query
        replay = nil  // closes (and so frees) a spill file at once
        replayOffset = 0
        formBody = nil
        formOffset = 0
        if !printSecrets.isEmpty { printSecrets = [] }
        printReferer = nil
        originalURL = nil
        plan = nil
        if !setHeaders.isEmpty { setHeaders = [] }
        headerCredential = nil
        upstreamStarted = 0
        challengeScheme = nil
        retry = nil
        limitedBy = nil
        if !upstreamSlots.isEmpty { upstreamSlots = [] }
        queuedWait = nil
        attempt = nil
        retryCause = nil
        if let c = capture {
            capture = nil
            c.finish()
        }
        trace = nil
    }
}
