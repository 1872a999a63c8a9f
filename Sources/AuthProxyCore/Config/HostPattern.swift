/// One entry of a host list such as `[tls] no_intercept`: `host` (any port), `host:port`, `*.suffix` (any
/// subdomain of `suffix`, not `suffix` itself, as in a credential's `match`), `*.suffix:port`, or an IPv6 literal in
/// brackets (`[::1]`, `[::1]:8443`). Host names compare without case and without one trailing dot.
public struct HostPattern: Sendable, Equatable, CustomStringConvertible {
    /// Lower-cased, without the `*.` when ``wildcard`` is set and without brackets for IPv6.
    public var host: String
    public var wildcard: Bool
    /// nil: every port.
    public var port: Int?

    public init(host: String, wildcard: Bool = false, port: Int? = nil) {
        self.host = host
        self.wildcard = wildcard
        self.port = port
    }

    public var description: String {
        let h = wildcard ? "*.\(host)" : (host.contains(":") ? "[\(host)]" : host)
        return port.map { "\(h):\($0)" } ?? h
    }

    /// nil when `text` is not one of the forms above (a scheme, a path or a `*` elsewhere is refused, so the list
    /// says exactly what it covers).
    public static func parse(_ text: String) -> HostPattern? {
        var rest = Substring(text.lowercased())
        var wildcard = false
        if rest.hasPrefix("*.") {
            wildcard = true
            rest = rest.dropFirst(2)
        }
        if rest.hasSuffix(".") { rest = rest.dropLast() }
        guard !rest.isEmpty, !rest.contains("*"), !rest.contains("/"),
            let parsed = try? RequestHeadParser.parseAuthority(rest), let (host, port) = parsed as (String, Int?)?
        else { return nil }
        var h = host
        if h.hasSuffix(".") { h.removeLast() }
        guard !h.isEmpty, !(wildcard && h.contains(":")) else { return nil }
        return HostPattern(host: h, wildcard: wildcard, port: port)
    }

    /// Whether a CONNECT to `host:port` falls under this entry.
    public func matches(host: String, port: Int) -> Bool {
        if let p = self.port, p != port { return false }
        var h = host.lowercased()
        if h.hasSuffix(".") { h.removeLast() }
        if wildcard { return h.count > self.host.count + 1 && h.hasSuffix("." + self.host) }
        return h == self.host
    }
}
