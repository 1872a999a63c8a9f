/// Whether a request may go again, unasked, on a new upstream connection after the one it went out on died
/// before any byte of the answer (a kept-alive connection the server closed as it was taken, or closed after
/// reading the request without answering).
///
/// RFC 9112 §9.3.1: a proxy must not retry a non-idempotent request automatically. The server may have read
/// and processed the whole request before it went away, and a second `applyEdits` or `addFeatures` would
/// change the data twice. So a request is sent again only when its method is idempotent (RFC 9110 §9.2.2), or
/// when it cannot have been processed: the connection failed before the whole request was handed to it.
/// Otherwise the client gets a 502 that says why (``UpstreamError/notResent``).
enum ResendPolicy {
    /// The methods RFC 9110 §9.2.2 defines as idempotent.
    static func isIdempotent(_ method: String) -> Bool {
        switch method {
        case "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE": return true
        default: return false
        }
    }

    /// `requestFullySent`: every byte of the request (head and body) was written to the connection that died.
    static func mayResend(method: String, requestFullySent: Bool) -> Bool {
        !requestFullySent || isIdempotent(method)
    }
}
