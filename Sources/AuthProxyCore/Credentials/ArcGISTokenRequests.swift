/// How an ArcGIS token or API key goes on a request and how an answer rejects it: the strategy the ArcGIS token
/// kinds share (their tokens are all ArcGIS tokens to the server), as pure functions over the request.
enum ArcGISTokenRequests {
    /// The largest urlencoded form collected whole for a token to go into it.
    static let maxFormBytes = 1024 * 1024

    /// `apiOnly`: a token from a token service is obtained only for the ArcGIS APIs (a portal's home and app
    /// pages, static files need none: no discovery, no token request, no backoff to poison the API roots).
    static func prepare(_ r: RequestView, apiOnly: Bool) -> Preparation {
        if apiOnly, ServerRoot.api(r.target) == nil { return Preparation(applies: false) }
        if TokenInjection.clientHasToken(pathAndQuery: r.target.pathAndQuery, headers: r.fields, form: r.body) {
            return Preparation(clientHasOwn: true)
        }
        // The token goes into an urlencoded form when the form is small enough to hold; a large or chunked form keeps
        // streaming and the token goes into the URL.
        if TokenInjection.site(placement: r.placement, method: r.method, isForm: r.isForm) == .form,
            let n = r.bodyLength, n >= 0, n <= Int64(maxFormBytes)
        {
            return Preparation(holdsBodyUpTo: maxFormBytes)
        }
        return Preparation()
    }

    /// The token at the site its placement and the request give (the `X-Esri-Authorization` header, the form, or
    /// the `token` parameter), every token of the client's removed; with the `Referer` it is bound to.
    static func apply(_ token: IssuedToken?, to r: inout OutgoingRequest) -> ApplyFailure? {
        guard let t = token else { return nil }
        if t.ssl && r.target.scheme == "http" {
            return ApplyFailure(
                message: "Credential '\(r.credential)': its token may only be sent over https",
                details: [
                    "The token service marked the token ssl:true; request \(r.target.origin) over https (or set upgrade_to_https when available)."
                ])
        }
        let site = TokenInjection.site(placement: r.placement, method: r.method, isForm: r.isForm)
        let applied = TokenInjection.apply(
            token: t.value, site: site, pathAndQuery: r.target.pathAndQuery, headers: r.fields,
            form: site == .form ? r.body : nil)
        r.fields = applied.headers
        if let referer = t.referer { r.fields.setInjected(name: "Referer", value: referer) }
        if site == .form, let form = applied.form {
            r.body = form
            r.bodyLength = Int64(form.count)
        }
        r.target.pathAndQuery = applied.pathAndQuery
        return nil
    }

    /// 498/499 in the status; a small JSON, JSONP or HTML answer may say it in its body; a redirect to sign in
    /// (for tokens a web tier may guard, `signInURLs` non-nil) says the token was not accepted.
    static func rejection(of head: ResponseView, signInURLs: [String]? = nil) -> Rejection {
        if let signInURLs, signInRedirect(of: head, signInURLs: signInURLs) != nil { return .rejected }
        if TokenRejection.isRejection(status: head.status) { return .rejected }
        if let type = head.first("content-type"), !TokenRejection.mayCarryError(contentType: type) { return .none }
        return .readBody
    }

    /// A 498/499 in the small JSON, JSONP or HTML body (in any coding ``TokenRejection`` reads).
    static func rejection(of head: ResponseView, body: [UInt8]) -> BodyVerdict {
        BodyVerdict(
            rejected: TokenRejection.isRejection(
                status: head.status, contentType: head.first("content-type"),
                contentEncoding: head.first("content-encoding"), body: body))
    }

    static func signInRedirect(of head: ResponseView, signInURLs: [String]) -> SignInRedirect.Target? {
        guard head.status >= 300, head.status < 400 else { return nil }
        return SignInRedirect.classify(
            status: head.status, location: head.first("location"), request: head.request, signInURLs: signInURLs)
    }
}

/// The kinds whose tokens are ArcGIS tokens to the server (an API key, a pregenerated token, and the tokens of
/// `generateToken`, a portal's client credentials or a sign-in): they share ``ArcGISTokenRequests``, so each states
/// only how it differs.
public protocol ArcGISTokenKind: CredentialKind {
    /// Tokens go on the ArcGIS APIs only (tokens from a token service: no token for a portal's home page).
    var apiOnly: Bool { get }
    /// Where a web tier in front of its servers sends a client to sign in (`sign_in_urls`); nil: tokens of this
    /// kind are not read as rejected by a redirect to sign in.
    var signInPages: [String]? { get }
}

extension ArcGISTokenKind {
    public static var sharedKeys: SharedCredentialKeys { [.tokenPlacement] }
    public var role: CredentialRole { .token }
    public var readsBodiesForRejection: Bool { true }
    public var secretIsItsToken: Bool { true }

    public func prepare(_ request: RequestView) -> Preparation {
        ArcGISTokenRequests.prepare(request, apiOnly: apiOnly)
    }

    public func apply(_ token: IssuedToken?, to request: inout OutgoingRequest) -> ApplyFailure? {
        ArcGISTokenRequests.apply(token, to: &request)
    }

    public func rejection(of head: ResponseView) -> Rejection {
        ArcGISTokenRequests.rejection(of: head, signInURLs: signInPages)
    }

    public func rejection(of head: ResponseView, body: [UInt8]) -> BodyVerdict {
        ArcGISTokenRequests.rejection(of: head, body: body)
    }

    public func signInRedirect(of head: ResponseView) -> SignInRedirect.Target? {
        signInPages.flatMap { ArcGISTokenRequests.signInRedirect(of: head, signInURLs: $0) }
    }
}
