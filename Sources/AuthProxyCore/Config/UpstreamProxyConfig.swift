/// `[proxy] upstream_proxy` (or `upstream_pac`), `upstream_proxy_credential`, `no_proxy` and their companions: the
/// corporate parent proxy that requests go through (``Route``).
public struct UpstreamProxyConfig: Sendable, Equatable {
    /// Tried in order; empty: every request goes direct (unless ``pac`` chooses parents).
    public var parents: [ParentProxy] = []
    /// `upstream_pac`: a PAC file chooses the parents per destination instead of ``parents``.
    public var pac: PacSource? = nil
    /// How often the PAC file is read again (and retried after a failure, at most this long apart).
    public var pacRefreshSeconds = 300
    /// `upstream_pac_timeout_seconds`: how long one evaluation of the PAC file may take before its worker is
    /// killed (``PacEngine``).
    public var pacTimeoutSeconds = PacEngine.defaultDeadlineSeconds
    /// The `password` or `kerberos` credential the parents are authenticated with (nil: none).
    public var credentialName: String? = nil
    /// `upstream_proxy_credential_parents`: the parents (`host:port`, lower-cased, IPv6 in brackets) the credential
    /// is sent to; nil: every parent. A PAC file may name any parent (on an `http://` WPAD URL, whoever spoofs
    /// WPAD chooses it), and each would receive the credential.
    public var credentialParents: Set<String>? = nil
    /// Destinations that bypass the parents.
    public var noProxy = NoProxyList()
    /// How long a parent that failed (refused, timed out, still answered 407) is skipped before it is tried again.
    public var backoffSeconds = 30
    /// A PEM file of CAs for `https://` parents (the system's CAs otherwise).
    public var caFile: String? = nil

    public init() {}

    public var isConfigured: Bool { !parents.isEmpty || pac != nil }

    /// Whether `parent` may receive `upstream_proxy_credential`.
    public func mayAuthenticate(_ parent: ParentProxy) -> Bool {
        credentialParents?.contains(parent.authority) ?? true
    }

    /// What `authproxy check` warns about: an `http://` PAC URL (WPAD spoofing chooses the parents), and a
    /// credential that goes to whatever parent a PAC file names.
    public var warnings: [String] {
        var out: [String] = []
        if case .url(let u) = pac, u.lowercased().hasPrefix("http://") {
            out.append(
                "upstream_pac \(u) is fetched without TLS: whoever can answer for that name or spoof WPAD on the "
                    + "network chooses the parents every request goes through; use an https:// URL or a local file")
        }
        if pac != nil, credentialName != nil, credentialParents == nil {
            out.append(
                "upstream_proxy_credential '\(credentialName ?? "")' is sent to every parent the PAC file names: list "
                    + "the corporate parents in upstream_proxy_credential_parents = [\"host:port\", …]")
        }
        return out
    }

    /// The parents a request to `host:port` goes through, in configured order; empty: direct (or a PAC decides).
    public func parents(host: String, port: Int) -> [ParentProxy] {
        if parents.isEmpty || noProxy.bypasses(host: host, port: port) { return [] }
        return parents
    }
}

/// Where `upstream_pac` reads the PAC file: an http(s) URL (fetched by the proxy itself, directly, never through a
/// parent) or a local file.
public enum PacSource: Equatable, Sendable, CustomStringConvertible {
    case url(String)
    case file(String)

    /// `http://…`, `https://…`, `file:///path` or an absolute path.
    public static func parse(_ text: String) -> PacSource? {
        let lower = text.lowercased()
        if lower.hasPrefix("http://") || lower.hasPrefix("https://") {
            return HTTPURL.parse(text) == nil ? nil : .url(text)
        }
        if lower.hasPrefix("file://") {
            let path = String(text.dropFirst("file://".count))
            return path.hasPrefix("/") ? .file(path) : nil
        }
        return text.hasPrefix("/") ? .file(text) : nil
    }

    public var description: String {
        switch self {
        case .url(let u): return u
        case .file(let p): return p
        }
    }
}
