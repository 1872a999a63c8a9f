/// Label values for metrics: a small closed set each, so a series count stays bounded whatever clients send, and
/// never a URL path, query, end-user name or secret.
enum MetricLabels {
    /// A label value as the text format escapes it (a parent URL or credential name holds no quote or backslash,
    /// but a PAC file or a configuration could name anything).
    static func escaped(_ s: String) -> String {
        s.replacing("\\", with: "\\\\").replacing("\"", with: "\\\"").replacing("\n", with: "\\n")
    }

    /// Methods that get their own series; anything else is `other` (extension methods are unbounded).
    static let methods = ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "CONNECT"]

    /// Index of `method` in ``methods``, or `methods.count` for `other`.
    static func methodIndex(_ method: String) -> Int {
        methods.firstIndex(of: method) ?? methods.count
    }

    static func methodName(index: Int) -> String { index < methods.count ? methods[index] : "other" }

    /// `2xx` … `5xx`; `1xx` for an unexpected final informational status; `none` for an exchange that ended
    /// with no status (the client left before an answer was possible).
    static func statusClass(_ status: Int) -> String {
        switch status {
        case 100...199: return "1xx"
        case 200...299: return "2xx"
        case 300...399: return "3xx"
        case 400...499: return "4xx"
        case 500...599: return "5xx"
        default: return "none"
        }
    }

    /// The credential label of a request that used none.
    static let noCredential = "none"

    /// Why the proxy refused to serve something (`authproxy_denied_total{reason}`).
    enum DeniedReason: String, CaseIterable, Sendable {
        /// The client address is not in `allow_clients` (closed at accept).
        case clientAddress = "client_address"
        /// Missing or wrong `Proxy-Authorization` (407).
        case proxyAuthentication = "proxy_authentication"
        /// The destination resolves to an address in `deny_destinations` (403).
        case destination
        /// `unmatched = "deny"` and no credential matches (403).
        case unmatched
        /// CONNECT to a port outside `connect_ports` (403).
        case connectPort = "connect_port"
        /// A `/proxy` request from an origin not in `allowed_origins` (403).
        case origin
        /// `max_connections` or `max_connections_per_client` reached (refused at accept).
        case connectionLimit = "connection_limit"
        /// A client opened TLS to the proxy itself, which has no certificate for it (closed).
        case proxyTLS = "proxy_tls"
    }

    /// Upstream failure causes (`authproxy_upstream_errors_total{cause}`).
    enum UpstreamCause: String, CaseIterable, Sendable {
        case dns, connect, tls, timeout, reset
        /// The upstream's response was refused (RFC 9112 violations) or ended without one.
        case protocolError = "protocol"
        /// The proxy ran out of file descriptors.
        case descriptors
        case other
    }
}
