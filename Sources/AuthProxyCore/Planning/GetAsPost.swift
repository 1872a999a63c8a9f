/// Whether a long ArcGIS REST `GET` goes upstream as a `POST` form (`[proxy] get_as_post_above_bytes`). Pure.
///
/// A feature query with a long `where`, a big `geometry` or many `objectIds` exceeds what IIS and many front ends
/// accept (~2 KB: 414, or a silent truncation), and the injected token makes it longer still. ArcGIS REST
/// operations take the same parameters as an `application/x-www-form-urlencoded` body (arcgis-rest-js switches
/// above 2,000 characters), but GDAL never does (gdal #4703). So the proxy sends the operation as a `POST` with
/// the query, token included, as its body when the URL it would send is longer than the limit, or when the
/// upstream answered the `GET` with 414.
///
/// **Only reads, only where a credential applies.** The operations ``ArcGISOperation`` lists as reads
/// (`query`, `identify`, `export`, geometry and geocode operations, a portal `search`, …) on a request a credential
/// matched: a long URL there is the proxy's doing (the token it adds) or a GIS client's selection, and the proxy
/// knows the server. Edits (`deleteFeatures`, `applyEdits`, an item's `delete`) stay `GET`: converting them would
/// hand the server a `POST` that a GET-only CSRF guard would have refused, and the proxy has no business turning a
/// client's `GET` into a write. Tiles, attachments, item data and other downloads are not operations at all and stay
/// `GET`. Elsewhere — hosts without a credential — the client's request goes as it is.
enum GetAsPost {
    /// Why a request went as `POST` (the `cause` label of `authproxy_get_as_post_total`).
    enum Cause: String, Equatable, Sendable {
        /// The URL was longer than `get_as_post_above_bytes`.
        case length
        /// The upstream answered the `GET` with 414 URI Too Long.
        case status414 = "414"
    }

    /// Whether a request may go as a form at all: a `GET` without a body (nor a WebSocket handshake) whose query
    /// is not empty, to a read operation (``ArcGISOperation/isConvertibleRead(path:)``), matched by a credential.
    static func applies(method: String, hasBody: Bool, isUpgrade: Bool, matched: Bool, target: URLTarget) -> Bool {
        guard matched, method == "GET", !hasBody, !isUpgrade, let q = target.queryStart,
            target.pathAndQuery.utf8.index(after: q) != target.pathAndQuery.utf8.endIndex
        else { return false }
        return ArcGISOperation.isConvertibleRead(path: target.path)
    }

    /// Whether the URL `target` stands for (as sent: scheme, host, port, path and query) is longer than `limit`
    /// bytes; `limit` 0: never. Counted without building the URL, as this runs for every request.
    static func exceeds(_ target: URLTarget, limit: Int) -> Bool {
        guard limit > 0 else { return false }
        // Bounds first: a URL well under the limit (nearly every request) is decided without the exact count.
        let query = target.pathAndQuery.utf8.count
        if query > limit { return true }
        let host = target.host.utf8.count
        if query + host + 32 <= limit { return false }
        var length = target.scheme.utf8.count + 3 + host + query
        if target.host.utf8.contains(UInt8(ascii: ":")) { length += 2 }
        if !target.isDefaultPort { length += 1 + String(target.port).utf8.count }
        return length > limit
    }

    /// The `POST` form of `target`: the path alone, and the query (as sent, already percent-encoded, the token in
    /// it) as the body.
    static func form(of target: URLTarget) -> (target: URLTarget, body: [UInt8]) {
        var t = target
        guard let q = target.queryStart else { return (target, []) }
        let u = target.pathAndQuery.utf8
        t.pathAndQuery = String(target.pathAndQuery[..<q])
        return (t, Array(u[u.index(after: q)...]))
    }

    /// The `Content-Type` of the body.
    static let contentType = "application/x-www-form-urlencoded"
}
