/// How a response body is delimited towards the client (RFC 9112 §6), decided once when its head is committed.
struct ResponseFraming: Equatable {
    /// No body follows the head: HEAD requests, 1xx, 204 and 304 (upstream body bytes are dropped).
    var noBody: Bool
    /// The body is re-framed as chunks (the upstream gave no usable length and the client speaks HTTP/1.1).
    var chunked: Bool
    /// The `Content-Length` sent to the client, if any.
    var contentLength: Int64?
    /// Whether the connection stays open after the response: false when asked, or when the body can only be
    /// delimited by closing (an HTTP/1.0 client and no length).
    var keepAlive: Bool

    /// `upstreamLength` is the length every upstream `Content-Length` agrees on (nil when absent, conflicting,
    /// or overridden by `Transfer-Encoding`, since libcurl de-chunks the body).
    static func decide(
        status: Int, isHeadRequest: Bool, upstreamLength: Int64?, clientMinorVersion: Int,
        keepAlive: Bool
    ) -> ResponseFraming {
        let noBody = isHeadRequest || status == 204 || status == 304 || status < 200
        if noBody {
            // A 204 has neither body nor Content-Length (RFC 9110 §8.6); HEAD and 304 keep the length they announce.
            return ResponseFraming(
                noBody: true, chunked: false, contentLength: status == 204 ? nil : upstreamLength,
                keepAlive: keepAlive)
        }
        if let n = upstreamLength {
            return ResponseFraming(noBody: false, chunked: false, contentLength: n, keepAlive: keepAlive)
        }
        if clientMinorVersion >= 1 {
            return ResponseFraming(noBody: false, chunked: true, contentLength: nil, keepAlive: keepAlive)
        }
        return ResponseFraming(noBody: false, chunked: false, contentLength: nil, keepAlive: false)
    }
}
