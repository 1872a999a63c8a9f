/// A URL prefix a credential applies to: scheme + host (a leading `*.` matches any subdomain) + optional
/// port + optional path prefix that matches whole segments (`/arcgis` matches `/arcgis/rest/…`, not
/// `/arcgisdata`).
public struct MatchPrefix: Sendable, Equatable, CustomStringConvertible {
    public var scheme: String
    /// Lower-cased host; without the `*.` when ``wildcard`` is set.
    public var host: String
    public var wildcard: Bool
    /// nil: the scheme's default port.
    public var port: Int?
    /// Normalised without a trailing slash; empty for "any path".
    public var path: String

    public var description: String {
        let h = wildcard ? "*.\(host)" : (host.contains(":") ? "[\(host)]" : host)
        return "\(scheme)://\(h)\(port.map { ":\($0)" } ?? "")\(path)"
    }

    public var effectivePort: Int { port ?? (scheme == "https" ? 443 : 80) }

    /// How specific this prefix is, for longest-match selection.
    public var specificity: Int { (wildcard ? 0 : 1000) + host.count + path.count * 10_000 }

    public static func parse(_ text: String) -> MatchPrefix? {
        guard let schemeEnd = text.firstRange(of: "://") else { return nil }
        var scheme = text[..<schemeEnd.lowerBound].lowercased()
        // A WebSocket prefix is its handshake's http(s) prefix (RFC 6455 §3): `ws://h/p` matches as `http://h/p`.
        if scheme == "ws" { scheme = "http" } else if scheme == "wss" { scheme = "https" }
        guard scheme == "http" || scheme == "https" else { return nil }
        let rest = text[schemeEnd.upperBound...]
        // Bytes, not Characters: a `/`, `?` or `#` followed by a combining mark is one Character with it, which a
        // Character search would not find (the fuzzer's `http://h/…?\u{6DC}…` was taken as a path with a query).
        let slash = rest.utf8.firstIndex(of: UInt8(ascii: "/")) ?? rest.endIndex
        var authority = rest[..<slash]
        var path = String(rest[slash...])
        if path.utf8.contains(where: { $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }) { return nil }
        while path.hasSuffix("/") { path.removeLast() }
        var wildcard = false
        if authority.hasPrefix("*.") {
            wildcard = true
            authority = authority.dropFirst(2)
        }
        guard let parsed = try? RequestHeadParser.parseAuthority(authority),
            let (host, port) = parsed as (String, Int?)?,
            !host.contains("*")
        else { return nil }
        return MatchPrefix(scheme: scheme, host: host, wildcard: wildcard, port: port, path: path)
    }

    /// Whether a request for `target` falls under this prefix.
    public func matches(_ target: URLTarget) -> Bool {
        guard target.scheme == scheme, target.port == effectivePort else { return false }
        if wildcard {
            guard target.host.count > host.count + 1, target.host.hasSuffix("." + host) else { return false }
        } else if target.host != host {
            return false
        }
        if path.isEmpty { return true }
        // Bytes, not Characters: a path is compared as sent, and this runs for every request.
        let p = target.path.utf8, q = path.utf8
        guard p.count >= q.count, p.starts(with: q) else { return false }
        let after = p.index(p.startIndex, offsetBy: q.count)
        return after == p.endIndex || p[after] == UInt8(ascii: "/")
    }
}
