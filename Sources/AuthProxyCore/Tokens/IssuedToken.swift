/// A token ready to put on requests.
///
/// Its fields live in one immutable box: a token is copied from the cache to the exchange, into each attempt and
/// into the response's masking, so a copy is one retain rather than a copy of every field; a change makes a new box.
public struct IssuedToken: Sendable, Equatable, Codable {
    private var box: Box

    private final class Box: Sendable {
        let fields: Fields
        init(_ fields: Fields) { self.fields = fields }
    }

    private struct Fields: Sendable, Equatable, Codable {
        var value: String
        var expires: Int64?
        var issued: Int64
        var ssl: Bool
        var referer: String?
        var fresh = false

        enum CodingKeys: String, CodingKey {
            case value, expires, issued, ssl, referer
        }
    }

    private mutating func change(_ edit: (inout Fields) -> Void) {
        var f = box.fields
        edit(&f)
        box = Box(f)
    }

    public var value: String {
        _read { yield box.fields.value }
        set { change { $0.value = newValue } }
    }
    /// Milliseconds since the epoch, by the local clock (a token service's `expires` is converted from the
    /// server's clock, see ``ServerClock``); nil: never expires (API keys).
    public var expires: Int64? {
        get { box.fields.expires }
        set { change { $0.expires = newValue } }
    }
    /// Milliseconds since the epoch when it was obtained (for the refresh margin).
    public var issued: Int64 {
        get { box.fields.issued }
        set { change { $0.issued = newValue } }
    }
    /// `ssl: true`: must only be sent over https.
    public var ssl: Bool {
        get { box.fields.ssl }
        set { change { $0.ssl = newValue } }
    }
    /// The referer the token is bound to, sent with every request.
    public var referer: String? {
        _read { yield box.fields.referer }
        set { change { $0.referer = newValue } }
    }
    /// Handed to a request that waited for the token request that issued it (never stored): if the upstream
    /// rejects it, the server rejects new tokens (see ``TokenRetryPolicy``).
    public var fresh: Bool {
        get { box.fields.fresh }
        set { change { $0.fresh = newValue } }
    }

    public init(value: String, expires: Int64?, issued: Int64, ssl: Bool, referer: String?) {
        box = Box(Fields(value: value, expires: expires, issued: issued, ssl: ssl, referer: referer))
    }

    public static func == (a: IssuedToken, b: IssuedToken) -> Bool {
        a.box === b.box || a.box.fields == b.box.fields
    }

    public init(from decoder: any Decoder) throws {
        box = Box(try Fields(from: decoder))
    }

    public func encode(to encoder: any Encoder) throws {
        try box.fields.encode(to: encoder)
    }

    /// Refresh this long before expiry: 5 minutes, or 10 % of the lifetime if that is smaller.
    public var refreshMargin: Int64 {
        guard let expires else { return 0 }
        return min(5 * 60 * 1000, max(0, (expires - issued) / 10))
    }

    public func isExpired(at now: Int64) -> Bool { expires.map { now >= $0 } ?? false }
    public func needsRefresh(at now: Int64) -> Bool { expires.map { now >= $0 - refreshMargin } ?? false }
}

/// A token could not be had: the client gets a 502 naming the credential and the token service's message.
public struct TokenError: Error, Sendable, Equatable {
    public var credential: String
    public var message: String
    public var details: [String] = []
    /// A local condition (nothing was asked of a token service): no backoff.
    public var local = false
    /// The token service refused the token it was given (498/499 or GWM_0003 in its answer): for a
    /// federation exchange, the portal token is dead.
    public var tokenRejected = false
    /// The token service answered with a refusal (an error object), not an outage (no answer, HTTP error page):
    /// the request itself was refused.
    public var refused = false
    /// The token service refused the credential's own secret (password, client secret, refresh token): the
    /// whole credential backs off, not only the root that asked (see ``TokenFetcher/loginRefused(_:)``).
    public var loginRefused = false
    /// When the credential will ask its token service again (milliseconds since the epoch), if it is backing off.
    public var retryAt: Int64? = nil
    /// The token service asked for this pause (`Retry-After` on a 429 or 503), in milliseconds: the backoff waits
    /// at least this long, up to ``TokenBackoff/maxRetryAfter``.
    public var retryAfter: Int64? = nil

    var response: ErrorResponse {
        var d = details
        if let retryAt {
            let s = max(1, (retryAt - nowMillis() + 999) / 1000)
            d.append(
                "authproxy asks the token service again in \(s) s; until then requests for this credential get this answer."
            )
        }
        return ErrorResponse(status: 502, message: "Credential '\(credential)': \(message)", details: d)
    }
}
