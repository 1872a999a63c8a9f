/// `GET /proxy.pac` and `GET /wpad.dat`, on the proxy listener and on the admin listener: the answer, decided
/// without I/O. Clients fetch the file before they use the proxy, so it needs no proxy authentication; it may be
/// cached for ``maxAgeSeconds`` and revalidated with its `ETag` (a hash of the text, so it changes when a reload
/// changes the credentials, the address or the fallback).
enum PacEndpoint {
    /// What the script is made from, per configuration generation.
    struct Settings: Equatable, Sendable {
        var rules: [PacScriptBuilder.Rule]
        /// `[proxy] pac_address`, normalised (``authority(_:defaultPort:)``).
        var configuredAddress: String?
        var fallback: PacFallback
        /// The names the proxy listener answers the file for (``PacRequestPolicy``).
        var proxyListenerNames: Set<String>
        /// `allow_clients`: the admin listener, whose `[admin] allow` may admit more, serves the file only to
        /// clients the proxy listener admits.
        var allowClients: [AddressBlock]

        init(
            rules: [PacScriptBuilder.Rule], configuredAddress: String?, fallback: PacFallback,
            proxyListenerNames: Set<String> = [], allowClients: [AddressBlock] = AddressBlock.loopback
        ) {
            self.rules = rules
            self.configuredAddress = configuredAddress
            self.fallback = fallback
            self.proxyListenerNames = proxyListenerNames
            self.allowClients = allowClients
        }

        init(_ config: ProxyConfig) {
            self.init(
                rules: PacScriptBuilder.rules(config.credentials), configuredAddress: config.pacAddress,
                fallback: config.pacFallback,
                proxyListenerNames: PacRequestPolicy.proxyListenerNames(
                    pacHosts: config.pacHosts, pacAddress: config.pacAddress),
                allowClients: config.allowClients)
        }
    }

    struct Answer: Equatable {
        var status: Int
        var contentType: String
        var body: String
        /// Besides `Content-Type` and `Content-Length`.
        var headers: [(String, String)]

        static func == (a: Answer, b: Answer) -> Bool {
            a.status == b.status && a.contentType == b.contentType && a.body == b.body
                && a.headers.map { "\($0.0):\($0.1)" } == b.headers.map { "\($0.0):\($0.1)" }
        }
    }

    static let contentType = "application/x-ns-proxy-autoconfig"
    /// Long enough that a browser does not refetch it for every window, short enough that a reload reaches
    /// clients within minutes.
    static let maxAgeSeconds = 300

    /// Whether an origin-form target (path and query) asks for the PAC file.
    static func isPacTarget(_ target: some StringProtocol) -> Bool {
        let path = target.prefix { $0 != "?" }
        return path == "/proxy.pac" || path == "/wpad.dat"
    }

    /// `text` as a `host:port` authority for `PROXY host:port`, lower-cased (IPv6 in brackets), or nil when it is not
    /// one (a scheme, a path, user info, a bad port, characters a host name cannot have). Without a port,
    /// `defaultPort` (nil: the port is required).
    static func authority(_ text: String, defaultPort: Int? = nil) -> String? {
        guard !text.isEmpty, !text.contains("/"),
            let parsed = try? RequestHeadParser.parseAuthority(Substring(text.lowercased())),
            let (host, port) = parsed as (String, Int?)?, let p = port ?? defaultPort
        else { return nil }
        return host.contains(":") ? "[\(host)]:\(p)" : "\(host):\(p)"
    }

    /// The address for `PROXY`, in order: `pac_address`; the authority the client fetched the file from
    /// (`hostHeader`, port 80 when it names none), which reaches the proxy listener by construction; `listener`,
    /// the proxy listener's own address when it is not a wildcard. The admin listener passes nil for
    /// `hostHeader` and builds its fallback from the proxy listener (see ``ProxyServer``): its own port is not the
    /// proxy's.
    static func address(settings: Settings, hostHeader: String?, listener: String?) -> String? {
        if let a = settings.configuredAddress { return a }
        if let h = hostHeader, let a = authority(h, defaultPort: 80) { return a }
        return listener
    }

    /// The address for `PROXY` in the copy the admin listener serves: `pac_address`; else the first proxy
    /// listener (`listeners`, with their bound ports) that is not a wildcard; else the host the admin request was
    /// addressed to (it names this machine) with the proxy listener's port. Never the admin listener's own port.
    static func adminAddress(settings: Settings, listeners: [ListenAddress], requestHost: String?) -> String? {
        if let a = settings.configuredAddress { return a }
        if let l = listeners.first(where: { !$0.isWildcard }) { return authority(l.description) }
        guard let port = listeners.first?.port, let h = requestHost, let a = authority(h, defaultPort: 80),
            let colon = a.lastIndex(of: ":")
        else { return nil }
        return "\(a[..<colon]):\(port)"
    }

    /// A refusal by ``PacRequestPolicy``, as an answer.
    static func refused(_ r: PacRequestPolicy.Refusal) -> Answer {
        Answer(
            status: r.status, contentType: "text/plain; charset=utf-8", body: r.message + "\n",
            headers: [("X-Content-Type-Options", "nosniff")])
    }

    /// The answer to `method` with `If-None-Match: ifNoneMatch`, for clients that reach the proxy at `address`.
    static func answer(method: String, ifNoneMatch: String?, address: String?, settings: Settings) -> Answer {
        guard method == "GET" || method == "HEAD" else {
            return Answer(
                status: 405, contentType: "text/plain; charset=utf-8", body: "method not allowed (use GET or HEAD)\n",
                headers: [("Allow", "GET, HEAD")])
        }
        guard let address else {
            return Answer(
                status: 400, contentType: "text/plain; charset=utf-8",
                body: "cannot tell which address clients reach the proxy at: send Host, or set [proxy] pac_address\n",
                headers: [])
        }
        let script = PacScriptBuilder.script(rules: settings.rules, address: address, fallback: settings.fallback)
        let tag = etag(script)
        // nosniff: a browser refuses to run a response of this type as a page's script.
        let cache = [
            ("Cache-Control", "max-age=\(maxAgeSeconds)"), ("ETag", tag), ("X-Content-Type-Options", "nosniff"),
        ]
        if let inm = ifNoneMatch, matches(inm, tag) {
            return Answer(status: 304, contentType: contentType, body: "", headers: cache)
        }
        return Answer(status: 200, contentType: contentType, body: script, headers: cache)
    }

    /// A strong validator from the text itself: the same configuration gives the same tag in every process.
    static func etag(_ script: String) -> String {
        "\"" + Crypto.sha256Hex(script).prefix(32) + "\""
    }

    /// `If-None-Match` (RFC 9110 §13.1.2): `*`, or a list of tags compared weakly (`W/` ignored).
    static func matches(_ ifNoneMatch: String, _ tag: String) -> Bool {
        for item in ifNoneMatch.split(separator: ",") {
            var t = String(item).trimmingHTTPWhitespace()
            if t == "*" { return true }
            if t.hasPrefix("W/") { t = t.dropFirst(2) }
            if t == tag { return true }
        }
        return false
    }
}
