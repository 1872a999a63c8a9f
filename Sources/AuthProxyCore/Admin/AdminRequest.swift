/// What the admin listener decides a request by: the request line and the few header fields that say where the
/// request came from. Built from a parsed head by the server, or directly by unit tests.
struct AdminRequest: Equatable {
    var method: String
    /// The path and query (origin-form), `*` for authority-form.
    var target: String
    /// The authority the request is addressed to: the absolute-form target's, else the `Host` field; nil when
    /// an HTTP/1.0 request sent no `Host` (HTTP/1.1 without one is refused by the parser).
    var host: String?
    var origin: String?
    var referer: String?
    var secFetchSite: String?
    var secFetchDest: String?
    /// The client's address (nil in tests that do not care).
    var client: IPAddress?
    /// Every header field name, as sent.
    var headerNames: [String] = []
    var contentType: String?
    /// For the PAC file's revalidation.
    var ifNoneMatch: String?

    init(
        method: String, target: String, host: String?, origin: String? = nil, referer: String? = nil,
        secFetchSite: String? = nil, headerNames: [String] = [], contentType: String? = nil, ifNoneMatch: String? = nil,
        secFetchDest: String? = nil, client: IPAddress? = nil
    ) {
        self.secFetchDest = secFetchDest
        self.client = client
        self.ifNoneMatch = ifNoneMatch
        self.method = method
        self.target = target
        self.host = host
        self.origin = origin
        self.referer = referer
        self.secFetchSite = secFetchSite
        self.headerNames = headerNames
        self.contentType = contentType
    }

    init(head: RequestHead, client: IPAddress? = nil) {
        let target: String
        var host = head.headers.first("host")
        switch head.target {
        case .origin(let p):
            target = p
        case .absolute(let u):
            // RFC 9112 §3.2.2: the target's authority replaces Host.
            target = u.pathAndQuery
            host = u.isDefaultPort ? u.urlHost : "\(u.urlHost):\(u.port)"
        case .authority(let h, let port):
            target = "*"
            host = h.contains(":") ? "[\(h)]:\(port)" : "\(h):\(port)"
        }
        self.init(
            method: head.method, target: target, host: host, origin: head.headers.first("origin"),
            referer: head.headers.first("referer"), secFetchSite: head.headers.first("sec-fetch-site"),
            headerNames: head.headers.map(\.name), contentType: head.headers.first("content-type"),
            ifNoneMatch: head.headers.first("if-none-match"), secFetchDest: head.headers.first("sec-fetch-dest"),
            client: client)
    }
}
