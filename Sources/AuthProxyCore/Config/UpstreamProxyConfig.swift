/// `[proxy] upstream_proxy`, `upstream_proxy_credential`, `no_proxy` and their companions: the corporate parent
/// proxy that requests go through (``Route``).
public struct UpstreamProxyConfig: Sendable, Equatable {
    /// Tried in order; empty: every request goes direct.
    public var parents: [ParentProxy] = []
    /// The `password` or `kerberos` credential the parents are authenticated with (nil: none).
    public var credentialName: String? = nil
    /// Destinations that bypass the parents.
    public var noProxy = NoProxyList()
    /// How long a parent that failed (refused, timed out, still answered 407) is skipped before it is tried again.
    public var backoffSeconds = 30
    /// A PEM file of CAs for `https://` parents (the system's CAs otherwise).
    public var caFile: String? = nil

    public init() {}

    public var isConfigured: Bool { !parents.isEmpty }

    /// The parents a request to `host:port` goes through, in configured order; empty: direct.
    public func parents(host: String, port: Int) -> [ParentProxy] {
        if parents.isEmpty || noProxy.bypasses(host: host, port: port) { return [] }
        return parents
    }
}
