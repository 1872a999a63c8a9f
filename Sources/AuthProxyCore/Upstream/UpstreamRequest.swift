/// A request to send upstream, for either client: the own HTTP/1.1 client writes its head from it, and the libcurl
/// adapter (``CurlTransfer``) turns it into options and header lines.
struct UpstreamRequest {
    var method: String
    var url: String
    /// The request's fields as the client sent them (or as the proxy's own request sets them): hop-by-hop fields,
    /// those listed in `Connection`, `Host`, `Content-Length` and `Expect` are left out as the head is written
    /// (``HTTPHeaders/forEachForwardedField(_:)``).
    var fields: HTTPHeaders
    /// The `Via` value the request carries upstream (nil: none, for the proxy's own requests).
    var via: String? = nil
    /// nil: no body; -1: length unknown (sent chunked); otherwise the exact length.
    var bodyLength: Int64?
    var timeoutSeconds: Int
    /// Network-type credentials for this request (server trust, password, Kerberos, client certificate).
    var network = NetworkAuth()
    /// A limit on the whole exchange (the proxy's own requests); client requests use the stall check instead.
    var totalTimeoutSeconds: Int? = nil
    /// Addresses never connected to (`deny_destinations`), checked on each resolved address as libcurl opens
    /// the socket, so neither a host name nor DNS rebinding gets around it.
    var denyDestinations: [AddressBlock] = []
    /// The proxy's own requests (token and sign-in fetches), and the form it made from a read `GET`: asking for a
    /// token or reading twice does no harm, so they go again on a new connection like idempotent ones
    /// (``ResendPolicy``).
    var harmlessToRepeat = false
    /// The `Upgrade` value of a WebSocket handshake, sent with `Connection: Upgrade` (the own client only); nil
    /// for every other request.
    var upgrade: String? = nil
    /// The parent proxies it goes through (nil: direct).
    var parentRoute: ParentRoute? = nil
    /// The upstream attempt's span, when the exchange is traced: a parent proxy's CONNECT gets a child span
    /// (``ParentConnectSpan``).
    var trace: ProxySpan? = nil

    /// An ArcGIS edit operation (``ArcGISOperation/isEdit(path:)``): never sent again once all of it went out,
    /// whatever its method.
    var edits = false

    /// Whether the request may go again after a reused connection died with it unanswered.
    var resendable: Bool { !edits && (harmlessToRepeat || ResendPolicy.isIdempotent(method)) }
}
