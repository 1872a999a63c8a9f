/// One attempt at sending a forwarded request upstream, decided from the request as the client sent it, the plan
/// (the client it chose) and the configuration alone: the body it announces,
/// whether it may be sent again, and whether it goes as a `POST` form (``GetAsPost``). Pure: the connection builds
/// the request from it and the tokens (``ClientConnection/startTransfer(url:headers:)``), and keeps it on the
/// exchange so that a resend (an upstream retry, a `GET` refused 414 going again as a form) sends the same request.
struct ForwardAttempt: Equatable {
    /// Where it goes and the client's fields (hop-by-hop fields are removed by the client that writes them).
    let url: URLTarget
    let headers: HTTPHeaders
    let method: String
    let isUpgrade: Bool
    /// The client that carries it, as the planner chose it (``ForwardPlan/client``).
    let client: UpstreamClient
    /// The length of the body as the client's request goes (nil: none; -1: chunked), before any `POST` form.
    let bodyLength: Int64?
    /// An ArcGIS edit operation, whatever its method (``ArcGISOperation``): never repeated.
    let edits: Bool
    /// Whether the attempt is kept to be sent again: retries or `GET`→`POST` are on, and the request is one
    /// ``RetryPolicy`` lets the proxy repeat (not a WebSocket handshake, nor one with a body, nor an edit).
    let resendable: Bool
    /// The request goes as a `POST` form, and why; nil: as the client sent it. Carried over from one attempt of the
    /// exchange to the next.
    private(set) var getAsPost: GetAsPost.Cause?

    /// `heldForm`: the length of a form body collected whole for the credential (nil: none); `retries`: upstream
    /// retries are on; `getAsPostLimit`: `get_as_post_above_bytes` (0: off); `getAsPost`: the cause an earlier
    /// attempt of the exchange went as a form for.
    init(
        url: URLTarget, headers: HTTPHeaders, method: String, framing: BodyFraming, upgrade: String?,
        heldForm: Int?, client: UpstreamClient, retries: Bool, getAsPostLimit: Int, getAsPost: GetAsPost.Cause?
    ) {
        self.url = url
        self.headers = headers
        self.method = method
        isUpgrade = upgrade != nil
        self.client = client
        bodyLength = Self.bodyLength(method: method, framing: framing, heldForm: getAsPost == nil ? heldForm : nil)
        edits = ArcGISOperation.isEdit(path: url.pathAndQuery[...])
        resendable =
            (retries || getAsPostLimit > 0) && !isUpgrade
            && RetryPolicy.mayRetry(method: method, hasBody: bodyLength != nil, edits: edits)
        self.getAsPost = getAsPost
    }

    /// The body the request announces upstream: a collected form's length, else the client's framing (an empty
    /// `GET`/`HEAD` body is no body); a `HEAD` never has one.
    static func bodyLength(method: String, framing: BodyFraming, heldForm: Int?) -> Int64? {
        if method == "HEAD" { return nil }
        if let heldForm { return Int64(heldForm) }
        switch framing {
        case .none: return nil
        case .contentLength(let n): return n == 0 && method == "GET" ? nil : n
        case .chunked: return -1
        }
    }

    /// Whether the request goes as a `POST` form.
    enum Form: Equatable {
        case asSent
        /// As a form, decided by an earlier attempt (or a 414).
        case asForm
        /// As a form, decided now because the URL it would send is too long (counted once).
        case newlyByLength
    }

    /// Decided once the credentials applied to the request as sent (`applied`: the target it would go to, token
    /// included): a read the credential `matched` whose URL is longer than `limit` goes as a form, and so does every
    /// attempt after one that went as a form.
    mutating func form(applied: URLTarget, limit: Int, matched: Bool) -> Form {
        guard getAsPost != nil || GetAsPost.exceeds(applied, limit: limit),
            GetAsPost.applies(
                method: method, hasBody: bodyLength != nil, isUpgrade: isUpgrade, matched: matched, target: url)
        else { return .asSent }
        guard getAsPost == nil else { return .asForm }
        getAsPost = .length
        return .newlyByLength
    }

    /// Whether a final 414 to this attempt lets it go again as a form (``GetAsPost``): a resendable `GET` not yet
    /// sent as one, to a read the credential `matched`, with `get_as_post_above_bytes` on (`limit` > 0).
    func goesAsFormAfter414(limit: Int, matched: Bool) -> Bool {
        guard resendable, getAsPost == nil, limit > 0 else { return false }
        return GetAsPost.applies(method: method, hasBody: false, isUpgrade: isUpgrade, matched: matched, target: url)
    }

    /// The upstream refused the URL as too long: the next attempt goes as a form.
    mutating func refusedAsTooLong() {
        getAsPost = .status414
    }
}
