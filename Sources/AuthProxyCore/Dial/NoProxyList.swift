/// `[proxy] no_proxy`: the destinations that go direct although a parent proxy is configured. Matched by the
/// proxy itself on the request's host and port, so a relayed request, a tunnel, a WebSocket and a token fetch to
/// the same place take the same decision. No name is ever resolved: an address block applies to IP-literal
/// hosts only (resolving every name to test it breaks on split DNS, and costs a lookup per request).
public struct NoProxyList: Sendable, Equatable {
    public enum Entry: Sendable, Equatable {
        /// Every destination (`*`).
        case everything
        /// `<local>`: a name without a dot (an intranet short name), as Windows' proxy bypass list means it.
        case dotless
        /// An exact host (lower-cased, no trailing dot), optionally on one port only.
        case host(String, port: Int?)
        /// A domain and its subdomains: `example.com`, `.example.com` and `*.example.com` all mean `example.com`
        /// and anything under it (curl's and Go's reading of `NO_PROXY`), optionally on one port only.
        case domain(String, port: Int?)
        /// An address block, for IP-literal hosts.
        case block(AddressBlock)
    }

    public private(set) var entries: [Entry] = []

    public init() {}

    public var isEmpty: Bool { entries.isEmpty }

    /// Parses the list; the first entry that is none of the forms above is returned as the error.
    public static func parse(_ items: [String]) -> Result<NoProxyList, NoProxyEntryError> {
        var list = NoProxyList()
        for raw in items {
            guard let e = entry(raw) else { return .failure(NoProxyEntryError(entry: raw)) }
            list.entries.append(e)
        }
        return .success(list)
    }

    private static func entry(_ raw: String) -> Entry? {
        let text = raw.trimmingHTTPWhitespace().lowercased()
        if text == "*" { return .everything }
        if text == "<local>" { return .dotless }
        if text.contains("/") {
            return AddressBlock.parse(text).map { .block($0) }
        }
        let bare = text.hasPrefix("[") && text.hasSuffix("]") ? String(text.dropFirst().dropLast()) : text
        if IPAddress.parse(bare) != nil { return AddressBlock.parse(bare).map { .block($0) } }
        // host, host:port, [v6]:port, .domain, *.domain
        var name = Substring(text)
        var domain = false
        if name.hasPrefix("*.") {
            name = name.dropFirst(2)
            domain = true
        } else if name.hasPrefix(".") {
            name = name.dropFirst()
            domain = true
        }
        guard let parsed = try? RequestHeadParser.parseAuthority(name) else { return nil }
        var (host, port) = parsed
        if host.hasSuffix(".") { host.removeLast() }
        guard !host.isEmpty, !host.contains("*"), host.utf8.allSatisfy({ $0 > 0x20 && $0 != 0x7f }) else { return nil }
        if IPAddress.parse(host) != nil {
            // An address with a port: exact on that port.
            return .host(host, port: port)
        }
        // A bare name with dots is a domain, as in curl's NO_PROXY; a dotless one is that host only.
        if domain || host.contains(".") { return .domain(host, port: port) }
        return .host(host, port: port)
    }

    /// Whether a request to `host` (as the request names it; any case, a trailing dot allowed) on `port` goes
    /// direct.
    public func bypasses(host rawHost: String, port: Int) -> Bool {
        guard !entries.isEmpty else { return false }
        var host = rawHost.lowercased()
        if host.hasSuffix(".") { host.removeLast() }
        let ip = IPAddress.parse(host)
        for e in entries {
            switch e {
            case .everything:
                return true
            case .dotless:
                if ip == nil, !host.contains(".") { return true }
            case .host(let h, let p):
                if h == host, p == nil || p == port { return true }
            case .domain(let d, let p):
                guard ip == nil, p == nil || p == port else { continue }
                if host == d || (host.utf8.count > d.utf8.count && host.hasSuffix("." + d)) { return true }
            case .block(let b):
                if let ip, b.contains(ip) { return true }
            }
        }
        return false
    }
}

public struct NoProxyEntryError: Error, Equatable {
    public let entry: String
}
