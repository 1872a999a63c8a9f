/// A parent (upstream) proxy that requests may be routed through: `[proxy] upstream_proxy` or a PAC file's
/// `PROXY`/`HTTPS`/`SOCKS5` answer. Two parents are the same when their scheme, host and port are.
public struct ParentProxy: Hashable, Sendable, CustomStringConvertible {
    public enum Scheme: String, Sendable, CaseIterable {
        /// Plain HTTP to the parent: http requests in absolute form, everything else inside CONNECT.
        case http
        /// TLS to the parent itself (an "HTTPS proxy"), then as `http`.
        case https
        /// SOCKS5 with the name resolved by the parent.
        case socks5h
    }

    public var scheme: Scheme
    /// Lower-cased; an IPv6 address without brackets.
    public var host: String
    public var port: Int

    public init(scheme: Scheme, host: String, port: Int) {
        self.scheme = scheme
        self.host = host
        self.port = port
    }

    /// `scheme://host:port`, the form libcurl takes and metrics and messages show.
    public var url: String { "\(scheme.rawValue)://\(authority)" }
    public var authority: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
    public var description: String { url }

    /// Parses `http://host:port`, `https://host[:port]` or `socks5h://host:port` (a trailing `/` allowed, no
    /// path, no user info: the parent's credential is `upstream_proxy_credential`, never a URL).
    public static func parse(_ text: String) -> ParentProxy? {
        guard let sep = text.firstRange(of: "://"), let scheme = Scheme(rawValue: text[..<sep.lowerBound].lowercased())
        else { return nil }
        var rest = text[sep.upperBound...]
        if rest.hasSuffix("/") { rest = rest.dropLast() }
        guard !rest.isEmpty, !rest.contains("/"), !rest.contains("@"), !rest.contains("?"), !rest.contains("#"),
            let parsed = try? RequestHeadParser.parseAuthority(rest)
        else { return nil }
        let (host, port) = parsed
        guard !host.isEmpty, !host.contains("*") else { return nil }
        let defaultPort: Int? = scheme == .https ? 443 : nil
        guard let p = port ?? defaultPort else { return nil }
        return ParentProxy(scheme: scheme, host: host.lowercased(), port: p)
    }
}
