import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// Reads `proxy.conf` (TOML) into a ``ProxyConfig``. Unknown keys, wrong types and bad values are errors
/// that name the key and line. Any string may be written `"${ENV_NAME}"` or `"file:/path"` to take its value
/// from the environment or from a file's trimmed contents (container secrets).
public struct ConfigLoader: Sendable {
    public var environment: [String: String]
    /// Accept what an operator has not filled in yet: `REPLACE_ME` values and `${VAR}` references to unset
    /// variables (kept as written). For `authproxy doctor --config`, which reads the file for its trust
    /// settings and the credentials it names while more blocks are being added; never for `serve` or `check`.
    public var acceptUnfilled = false
    /// `serve --listen`: the addresses the proxy listens on instead of `[proxy] listen`, for the checks that
    /// depend on them (the admin listener's port). ``ConfigSource`` applies it to the result.
    public var listenOverride: [ListenAddress]? = nil

    public init(environment: [String: String] = ConfigLoader.processEnvironment()) {
        self.environment = environment
    }

    public func load(path: String) throws(ConfigError) -> ProxyConfig {
        try loadWithInputs(path: path).config
    }

    /// Loads `path` and reports what the result was made of: the file's text and every `file:` secret it
    /// named, each with a digest of the contents read (live reload watches these and compares the digests).
    public func loadWithInputs(path: String) throws(ConfigError) -> (config: ProxyConfig, inputs: ConfigInputs) {
        guard let text = readTextFile(path) else {
            throw ConfigError(key: "", line: nil, "cannot read configuration file '\(path)': \(lastErrorString())")
        }
        let reads = SecretFileReads()
        let config = try parse(text, reads: reads)
        return (config, ConfigInputs(configPath: path, configText: text, secretFiles: reads.files))
    }

    public func parse(_ text: String) throws(ConfigError) -> ProxyConfig {
        try parse(text, reads: nil)
    }

    /// `reads`, when given, collects the `file:` secrets resolved (path and contents as read).
    func parse(_ text: String, reads: SecretFileReads?) throws(ConfigError) -> ProxyConfig {
        let root: TOMLTable
        do {
            root = try TOMLParser.parse(text)
        } catch {
            throw ConfigError(key: "", line: error.line, "TOML syntax error: \(error.message)")
        }
        var config = ProxyConfig()
        var top = TableReader(root, path: "", env: environment, reads: reads, acceptUnfilled: acceptUnfilled)
        if var proxy = try top.table("proxy") {
            if let l = try proxy.stringArray("listen") {
                guard !l.values.isEmpty else {
                    throw ConfigError(key: "proxy.listen", line: l.line, "needs at least one address")
                }
                config.listen = try l.values.map { (s: String) throws(ConfigError) -> ListenAddress in
                    guard let a = ListenAddress.parse(s) else {
                        throw ConfigError(
                            key: "proxy.listen", line: l.line,
                            "\(proxy.shown("listen", s)) is not an address like 127.0.0.1:3128 or [::1]:3128")
                    }
                    return a
                }
            }
            if let ports = try proxy.intArray("connect_ports", range: 1...65535) { config.connectPorts = Set(ports) }
            if let u = try proxy.enumValue("unmatched", UnmatchedPolicy.self) { config.unmatched = u }
            if let c = try proxy.enumValue("http_client", HTTPClientChoice.self) { config.httpClient = c }
            if let s = try proxy.string("state_dir") { config.stateDir = s }
            if let t = try proxy.int("upstream_timeout_seconds", range: 1...86_400) {
                config.upstreamTimeoutSeconds = t
            }
            if let t = try proxy.int("header_timeout_seconds", range: 1...3600) { config.headerTimeoutSeconds = t }
            if let t = try proxy.int("idle_timeout_seconds", range: 1...86_400) { config.idleTimeoutSeconds = t }
            if let t = try proxy.int("shutdown_grace_seconds", range: 0...3600) { config.shutdownGraceSeconds = t }
            if let t = try proxy.int("tunnel_idle_timeout_seconds", range: 1...86_400) {
                config.tunnelIdleTimeoutSeconds = t
            }
            if let w = try proxy.int("workers", range: 1...64) {
                config.workers = w
                config.workersSet = true
            }
            if let m = try proxy.int("max_connections", range: 1...1_000_000) { config.maxConnections = m }
            if let m = try proxy.int("max_connections_per_client", range: 1...1_000_000) {
                config.maxConnectionsPerClient = m
            }
            if let blocks = try proxy.addressBlocks("allow_clients") {
                config.allowClients = blocks
                config.allowClientsSet = true
            }
            if let blocks = try proxy.addressBlocks("deny_destinations") { config.denyDestinations = blocks }
            if let o = try proxy.stringArray("allowed_origins") {
                for origin in o.values where origin != "*" {
                    guard let u = HTTPURL.parse(origin), u.target.pathAndQuery == "/", !origin.hasSuffix("/") else {
                        throw ConfigError(
                            key: "proxy.allowed_origins", line: o.line,
                            "\(proxy.shown("allowed_origins", origin)) is not an origin like https://maps.example.com (scheme, host, optional port; no path)"
                        )
                    }
                }
                config.allowedOrigins = o.values
            }
            if let k = try proxy.string("state_key") {
                guard k.utf8.count >= 16 else {
                    throw ConfigError(
                        key: "proxy.state_key", line: proxy.line(of: "state_key"),
                        "must be at least 16 characters (use a long random secret)")
                }
                config.stateKey = k
            }
            if let m = try proxy.int("max_replay_bytes", range: 0...(1 << 40)) { config.maxReplayBytes = Int64(m) }
            if let w = try proxy.bool("watch_config") { config.watchConfig = w }
            if let r = try proxy.int("upstream_retries", range: 0...10) { config.upstreamRetries = r }
            if let w = try proxy.int("max_retry_wait_seconds", range: 0...300) { config.maxRetryWaitSeconds = w }
            if let b = try proxy.int("retry_budget_percent", range: 0...100) { config.retryBudgetPercent = b }
            if let d = try proxy.int("expiry_warning_days", range: 0...365) { config.expiryWarningDays = d }
            if let r = try proxy.enumValue("refresh", RefreshMode.self) { config.refresh = r }
            if let g = try proxy.int("get_as_post_above_bytes", range: 0...(1 << 20)) { config.getAsPostAboveBytes = g }
            try parseUpstreamProxy(&proxy, into: &config.upstreamProxy)
            if let d = try proxy.int("min_shutdown_delay_seconds", range: 0...3600) {
                config.minShutdownDelaySeconds = d
            }
            config.tlsCert = try proxy.string("tls_cert")
            config.tlsKey = try proxy.string("tls_key")
            if (config.tlsCert == nil) != (config.tlsKey == nil) {
                let missing = config.tlsCert == nil ? "tls_cert" : "tls_key"
                throw ConfigError(
                    key: "proxy." + missing, line: proxy.line(of: missing == "tls_cert" ? "tls_key" : "tls_cert"),
                    "missing: tls_cert and tls_key go together (the proxy's own TLS certificate and its key, PEM files)"
                )
            }
            if let a = try proxy.string("pac_address") {
                guard let address = PacEndpoint.authority(a) else {
                    throw ConfigError(
                        key: "proxy.pac_address", line: proxy.line(of: "pac_address"),
                        "\(proxy.shown("pac_address", a)) is not a host:port like proxy.example.com:3128 (the address clients use in PROXY host:port; no scheme or path)"
                    )
                }
                config.pacAddress = address
            }
            if let f = try proxy.enumValue("pac_fallback", PacFallback.self) { config.pacFallback = f }
            if let names = try proxy.stringArray("pac_hosts") {
                config.pacHosts = try Self.hostNames(
                    names, key: "proxy.pac_hosts", example: "proxy.example",
                    alwaysAccepted: "IP addresses, localhost and pac_address's host"
                ) { proxy.shown("pac_hosts", $0) }
            }
            try proxy.finish()
        }
        if var log = try top.table("log") {
            if let l = try log.string("level") {
                guard let level = Logger.Level(rawValue: l) else {
                    throw ConfigError(
                        key: "log.level", line: log.line(of: "level"),
                        "\(log.shown("level", l)) is not one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", "))"
                    )
                }
                config.logLevel = level
            }
            if let f = try log.enumValue("format", LogFormat.self) { config.logFormat = f }
            try log.finish()
        }
        if var admin = try top.table("admin") {
            guard let l = try admin.string("listen") else {
                throw ConfigError(
                    key: "admin.listen", line: admin.table.line,
                    "[admin] needs listen, e.g. listen = \"127.0.0.1:9128\"")
            }
            guard let address = ListenAddress.parse(l) else {
                throw ConfigError(
                    key: "admin.listen", line: admin.line(of: "listen"),
                    "\(admin.shown("listen", l)) is not an address like 127.0.0.1:9128 or [::1]:9128")
            }
            var settings = AdminConfig(listen: address)
            if let blocks = try admin.addressBlocks("allow") { settings.allow = blocks }
            if let names = try admin.stringArray("hosts") {
                settings.hosts = try Self.hostNames(
                    names, key: "admin.hosts", example: "admin.example", alwaysAccepted: "IP addresses and localhost"
                ) { admin.shown("hosts", $0) }
            }
            if let capture = try admin.bool("capture") { settings.capture = capture }
            if let q = try admin.bool("quitquitquit") { settings.quitquitquit = q }
            try admin.finish()
            config.admin = settings
        }
        if var tls = try top.table("tls") {
            config.tls.caCert = try tls.string("ca_cert")
            config.tls.caKey = try tls.string("ca_key")
            if let i = try tls.enumValue("intercept", TLSConfig.Intercept.self) { config.tls.intercept = i }
            if let hosts = try tls.stringArray("no_intercept") {
                config.tls.noIntercept = try hosts.values.map { (h: String) throws(ConfigError) -> HostPattern in
                    guard let p = HostPattern.parse(h) else {
                        throw ConfigError(
                            key: "tls.no_intercept", line: hosts.line,
                            "\(tls.shown("no_intercept", h)) is not a host, host:port or *.domain (no scheme or path)")
                    }
                    return p
                }
            }
            if (config.tls.caCert == nil) != (config.tls.caKey == nil) {
                throw ConfigError(key: "tls", line: tls.table.line, "ca_cert and ca_key go together")
            }
            try tls.finish()
        }
        if var cluster = try top.table("cluster") {
            config.cluster = try parseCluster(&cluster)
        }
        config.tracing = try parseTracing(top.table("tracing"))
        if let entries = try top.tableArray("credential") {
            var names = Set<String>()
            for (index, var entry) in entries.enumerated() {
                let credential = try parseCredential(
                    &entry, index: index, parentCredential: config.upstreamProxy.credentialName,
                    defaultRefresh: config.refresh)
                guard names.insert(credential.name).inserted else {
                    throw ConfigError(
                        key: entry.path + ".name", line: entry.line(of: "name"),
                        "duplicate credential name '\(credential.name)'")
                }
                config.credentials.append(credential)
            }
        }
        if let entries = try top.tableArray("upstream") {
            config.upstreamLimits = try Self.parseUpstreamLimits(entries)
        }
        if let entries = try top.tableArray("client") {
            config.clients = try parseClients(entries, credentials: config.credentials)
            if !config.clients.isEmpty, !config.allowClientsSet {
                // Proxy authentication is the access control: every address may try (allow_clients narrows it).
                config.allowClients = AddressBlock.everywhere
            }
        }
        if let entries = try top.tableArray("app") {
            config.apps = try parseApps(entries, credentials: config.credentials)
        }
        let principals = Set(
            config.credentials.compactMap { c -> String? in
                (c.kind as? KerberosSettings)?.principal
            })
        if principals.count > 1 {
            // The credentials, not the principals: a principal may have been read from a file or the environment.
            let holders = config.credentials.filter { $0.kind is KerberosSettings }.map(\.name)
            throw ConfigError(
                key: "credential", line: nil,
                "only one Kerberos identity per proxy process is supported (GSS-API's credential cache is process-wide); found \(principals.count) different principals in \(holders.joined(separator: ", "))"
            )
        }
        try top.finish()
        if config.cluster != nil, config.stateKey == nil {
            throw ConfigError(
                key: "proxy.state_key", line: root["cluster"]?.line,
                "[cluster] needs [proxy] state_key: tokens in Redis are encrypted with it, and every replica must have the same one"
            )
        }
        if let c = config.cluster, c.replicas == nil,
            let shared = config.credentials.first(where: { $0.sharedByFleet })
        {
            throw ConfigError(
                key: "cluster.replicas", line: root["cluster"]?.line,
                "missing: credential '\(shared.name)' has a limit the fleet shares through Redis (rate_limit with scope = \"credential\", or daily_quota); give the number of replicas, e.g. replicas = 3, so that each replica enforces limit ÷ replicas while Redis cannot be used"
            )
        }
        try checkParentCredential(config, line: root["proxy"]?.line)
        let listen = listenOverride ?? config.listen
        if let admin = config.admin,
            listen.contains(where: {
                $0.port == admin.listen.port && $0.port != 0
                    && ($0.host == admin.listen.host || $0.host == "0.0.0.0" || $0.host == "::"
                        || admin.listen.host == "0.0.0.0" || admin.listen.host == "::")
            })
        {
            let which = listenOverride == nil ? "a [proxy] listen address" : "a --listen address"
            throw ConfigError(
                key: "admin.listen", line: nil,
                "\(admin.listen) overlaps \(which): the admin listener needs its own port, so clients of the proxy cannot reach it"
            )
        }
        if let problem = config.openRelayProblem {
            throw ConfigError(
                key: "proxy.listen",
                line: root["proxy"].flatMap { n in
                    if case .table(let t) = n.value { return t["listen"]?.line ?? n.line } else { return n.line }
                }, problem)
        }
        return config
    }

    /// `[cluster]`: `redis` (a `redis://` or `rediss://` URL, user and password in it; the whole value may be
    /// `${ENV}` or `file:`), `ca`/`cert`/`key` for `rediss://`, `key_prefix`, `timeout_ms`, `required`,
    /// `lock_wait_seconds`, `replicas`.
    private func parseCluster(_ t: inout TableReader) throws(ConfigError) -> ClusterConfig {
        guard let url = try t.string("redis") else {
            throw ConfigError(
                key: "cluster.redis", line: t.table.line,
                "[cluster] needs redis, e.g. redis = \"redis://redis.example:6379/0\" (or rediss:// for TLS)")
        }
        var endpoint: RedisEndpoint
        switch RedisEndpoint.parse(url) {
        case .success(let e): endpoint = e
        case .failure(let p):
            throw ConfigError(key: "cluster.redis", line: t.line(of: "redis"), "\(t.shown("redis", url)) \(p.message)")
        }
        let ca = try t.string("ca")
        let cert = try t.string("cert")
        let key = try t.string("key")
        if (cert == nil) != (key == nil) {
            throw ConfigError(
                key: "cluster." + (cert == nil ? "cert" : "key"), line: t.line(of: cert == nil ? "key" : "cert"),
                "missing: cert and key go together (the client certificate Redis asks for, and its key; PEM files)")
        }
        if endpoint.tls != nil {
            endpoint.tls = RedisEndpoint.TLS(ca: ca, cert: cert, key: key)
        } else if ca != nil || cert != nil {
            throw ConfigError(
                key: "cluster." + (ca != nil ? "ca" : "cert"), line: t.line(of: ca != nil ? "ca" : "cert"),
                "is for TLS: write the redis URL as rediss://")
        }
        var c = ClusterConfig(endpoint: endpoint)
        if let p = try t.literalString("key_prefix") {
            guard !p.isEmpty, p.utf8.count <= 64, !p.contains(where: { $0 == " " || $0.isNewline }) else {
                throw ConfigError(
                    key: "cluster.key_prefix", line: t.line(of: "key_prefix"),
                    "must be 1…64 characters without spaces, e.g. \"authproxy:\" or \"gis-fleet:\"")
            }
            c.keyPrefix = p
        }
        if let ms = try t.int("timeout_ms", range: 10...60_000) { c.timeoutMillis = ms }
        if let r = try t.bool("required") { c.required = r }
        if let w = try t.int("lock_wait_seconds", range: 1...600) { c.lockWaitSeconds = w }
        c.replicas = try t.int("replicas", range: 1...10_000)
        try t.finish()
        return c
    }

    /// `upstream_proxy` (one URL or a list) or `upstream_pac` (with `upstream_pac_refresh_seconds`),
    /// `upstream_proxy_credential`, `upstream_proxy_backoff_seconds`, `upstream_proxy_ca` and `no_proxy`.
    private func parseUpstreamProxy(_ proxy: inout TableReader, into u: inout UpstreamProxyConfig) throws(ConfigError) {
        if let list = try proxy.stringOrArray("upstream_proxy") {
            var seen = Set<ParentProxy>()
            for text in list.values {
                guard let p = ParentProxy.parse(text) else {
                    throw ConfigError(
                        key: "proxy.upstream_proxy", line: list.line,
                        "\(proxy.shown("upstream_proxy", text)) is not a proxy URL like http://proxy.corp.example:8080 "
                            + "(http, https or socks5h; host and port; no path; the parent's user and password go in a "
                            + "credential named by upstream_proxy_credential)")
                }
                guard seen.insert(p).inserted else {
                    throw ConfigError(key: "proxy.upstream_proxy", line: list.line, "\(p) is listed twice")
                }
                u.parents.append(p)
            }
        }
        // Verbatim: `file:///path` is a PAC location here, not a secret file reference.
        if let text = try proxy.verbatimString("upstream_pac") {
            guard u.parents.isEmpty else {
                throw ConfigError(
                    key: "proxy.upstream_pac", line: proxy.line(of: "upstream_pac"),
                    "upstream_proxy and upstream_pac are alternatives: set one of them (a PAC file names its parents itself)"
                )
            }
            guard let source = PacSource.parse(text) else {
                throw ConfigError(
                    key: "proxy.upstream_pac", line: proxy.line(of: "upstream_pac"),
                    "\(proxy.shown("upstream_pac", text)) is not a PAC file location like http://wpad.corp.example/wpad.dat, "
                        + "file:///etc/authproxy/proxy.pac or an absolute path")
            }
            u.pac = source
        }
        if let r = try proxy.int("upstream_pac_refresh_seconds", range: 1...86400) {
            guard u.pac != nil else {
                throw ConfigError(
                    key: "proxy.upstream_pac_refresh_seconds", line: proxy.line(of: "upstream_pac_refresh_seconds"),
                    "applies only with upstream_pac")
            }
            u.pacRefreshSeconds = r
        }
        if let t = try proxy.int("upstream_pac_timeout_seconds", range: 1...120) {
            guard u.pac != nil else {
                throw ConfigError(
                    key: "proxy.upstream_pac_timeout_seconds", line: proxy.line(of: "upstream_pac_timeout_seconds"),
                    "applies only with upstream_pac")
            }
            u.pacTimeoutSeconds = t
        }
        u.credentialName = try proxy.literalString("upstream_proxy_credential")
        if let list = try proxy.stringArray("upstream_proxy_credential_parents") {
            guard u.credentialName != nil else {
                throw ConfigError(
                    key: "proxy.upstream_proxy_credential_parents", line: list.line,
                    "applies only with upstream_proxy_credential")
            }
            var names = Set<String>()
            for text in list.values {
                guard let a = PacEndpoint.authority(text) else {
                    throw ConfigError(
                        key: "proxy.upstream_proxy_credential_parents", line: list.line,
                        "\(proxy.shown("upstream_proxy_credential_parents", text)) is not a parent's host:port like "
                            + "proxy.corp.example:8080 (no scheme; the port is required)")
                }
                names.insert(a)
            }
            u.credentialParents = names
        }
        if let b = try proxy.int("upstream_proxy_backoff_seconds", range: 1...3600) { u.backoffSeconds = b }
        if let ca = try proxy.string("upstream_proxy_ca") {
            guard access(ca, R_OK) == 0 else {
                throw ConfigError(
                    key: "proxy.upstream_proxy_ca", line: proxy.line(of: "upstream_proxy_ca"),
                    "cannot read \(proxy.shown("upstream_proxy_ca", ca)): \(lastErrorString())")
            }
            u.caFile = ca
        }
        if let list = try proxy.stringArray("no_proxy") {
            switch NoProxyList.parse(list.values) {
            case .success(let n): u.noProxy = n
            case .failure(let e):
                throw ConfigError(
                    key: "proxy.no_proxy", line: list.line,
                    "\(proxy.shown("no_proxy", e.entry)) is not a host, host:port, domain (example.com, .example.com, "
                        + "*.example.com), address block (10.0.0.0/8), <local> or *")
            }
        }
        if !u.isConfigured {
            for key in [
                "upstream_proxy_credential", "upstream_proxy_credential_parents", "upstream_proxy_ca", "no_proxy",
                "upstream_proxy_backoff_seconds",
            ]
            where proxy.table[key] != nil {
                throw ConfigError(
                    key: "proxy." + key, line: proxy.line(of: key), "applies only with upstream_proxy or upstream_pac")
            }
        }
    }

    /// The parent's credential exists and is a `password` or `kerberos` one.
    private func checkParentCredential(_ config: ProxyConfig, line: Int?) throws(ConfigError) {
        guard let name = config.upstreamProxy.credentialName else { return }
        guard let c = config.credentials.first(where: { $0.name == name }) else {
            throw ConfigError(
                key: "proxy.upstream_proxy_credential", line: line,
                "names credential '\(name)', which is not defined")
        }
        switch c.kind.role {
        case .network(.password), .network(.kerberos): break
        default:
            throw ConfigError(
                key: "proxy.upstream_proxy_credential", line: line,
                "credential '\(name)' is not a password or kerberos credential (a parent proxy takes Basic, Digest, NTLM or Negotiate)"
            )
        }
    }

    /// `[[client]]`: users of the proxy (Proxy-Authorization: Basic) and the credentials each may use.
    private func parseClients(_ entries: [TableReader], credentials: [Credential]) throws(ConfigError) -> [ProxyClient]
    {
        var names = Set<String>()
        let known = Set(credentials.map(\.name))
        var out: [ProxyClient] = []
        for var entry in entries {
            guard let name = try entry.literalString("name"), !name.isEmpty else {
                throw entry.missing("name", "every client needs a name")
            }
            guard !name.contains(":"), name.utf8.allSatisfy({ $0 > 0x20 && $0 != 0x7f }) else {
                throw ConfigError(
                    key: entry.path + ".name", line: entry.line(of: "name"),
                    "client name '\(name)' may not contain ':', spaces or control characters (Basic authentication)")
            }
            guard names.insert(name).inserted else {
                throw ConfigError(
                    key: entry.path + ".name", line: entry.line(of: "name"), "duplicate client name '\(name)'")
            }
            guard let password = try entry.string("password"), !password.isEmpty else {
                throw entry.missing("password", "client '\(name)' needs a password")
            }
            var scope: [String]? = nil
            if let list = try entry.stringArray("credentials") {
                for c in list.values where !known.contains(c) {
                    throw ConfigError(
                        key: entry.path + ".credentials", line: list.line,
                        "client '\(name)' names credential \(entry.shown("credentials", c)), which is not defined")
                }
                scope = list.values
            }
            try entry.finish()
            out.append(ProxyClient(name: name, password: password, credentials: scope))
        }
        return out
    }

    /// The kinds that can fetch tokens, for the errors about `prefetch` and `refresh`.
    static var fetchingKinds: String {
        CredentialKinds.all.filter { $0.fetchesTokens }.map { $0.typeName }.joined(separator: ", ")
    }

    private func parseCredential(
        _ entry: inout TableReader, index: Int, parentCredential: String?, defaultRefresh: RefreshMode
    ) throws(ConfigError) -> Credential {
        guard let name = try entry.literalString("name"), !name.isEmpty else {
            throw entry.missing("name", "every credential needs a name")
        }
        guard let type = try entry.string("type") else {
            throw entry.missing("type", "credential '\(name)' needs a type")
        }
        // The parent proxy's credential may serve the parent only.
        let match = try entry.stringOrArray("match") ?? (name == parentCredential ? ([], entry.table.line) : nil)
        guard let match, !match.values.isEmpty || name == parentCredential else {
            throw entry.missing("match", "credential '\(name)' needs a match URL prefix")
        }
        let prefixes = try match.values.map { (s: String) throws(ConfigError) -> MatchPrefix in
            guard let p = MatchPrefix.parse(s) else {
                throw ConfigError(
                    key: entry.path + ".match", line: match.line,
                    "\(entry.shown("match", s)) is not a URL prefix like https://host[:port][/path] (http, https, ws or wss; a leading *. matches subdomains)"
                )
            }
            return p
        }
        guard let kindType = CredentialKinds.named(type) else {
            throw ConfigError(
                key: entry.path + ".type", line: entry.line(of: "type"),
                "credential type \(entry.shown("type", type)) of '\(name)' is not supported (supported: \(CredentialKinds.names.joined(separator: ", ")))"
            )
        }
        // Kinds with their own placement read it themselves (an oauth2 token's "header" or "query").
        let placement =
            kindType.sharedKeys.contains(.tokenPlacement)
            ? try entry.enumValue("token_placement", TokenPlacement.self) ?? .param : .param
        let override = try entry.bool("override_client_token") ?? false
        let upgrade = try entry.bool("upgrade_to_https") ?? false
        let allowJSONP = try entry.bool("allow_jsonp") ?? false
        let prefetch = try entry.bool("prefetch") ?? false
        let refresh = try entry.enumValue("refresh", RefreshMode.self)
        let scrub = try entry.bool("scrub_responses")
        let layer = try entry.enumValue("layer", Credential.Layer.self) ?? .service
        if layer == .gateway, !kindType.sharedKeys.contains(.gatewayLayer) {
            let gatewayKinds = CredentialKinds.all.filter { $0.sharedKeys.contains(.gatewayLayer) }.map { $0.typeName }
            throw ConfigError(
                key: entry.path + ".layer", line: entry.line(of: "layer"),
                "layer = \"gateway\" applies to \(gatewayKinds.joined(separator: " and ")) credentials only (not to \(type)): a gateway in front of the service takes a static header or an OAuth2 bearer token"
            )
        }
        let intercept = try entry.bool("intercept") ?? true
        var rateLimit: RateLimit? = nil
        if var r = try entry.table("rate_limit") {
            guard let n = try r.int("requests", range: 1...10_000_000),
                let per = try r.int("per_seconds", range: 1...86_400)
            else {
                throw ConfigError(
                    key: entry.path + ".rate_limit", line: r.table.line,
                    "needs requests and per_seconds, e.g. rate_limit = { requests = 600, per_seconds = 60 }")
            }
            let scope = try r.enumValue("scope", RateLimit.Scope.self) ?? .client
            try r.finish()
            rateLimit = RateLimit(requests: n, perSeconds: per, scope: scope)
        }
        let limits = try Self.parseCredentialLimits(&entry)

        let kind = try kindType.parse(&entry, name: name)
        let printServices = try printServices(
            entry.stringOrArray("print_services"), entry: entry, kind: kind, name: name)
        try entry.finish()
        var credential = Credential(
            name: name, kind: kind, match: prefixes, placement: placement, overrideClientToken: override,
            line: entry.table.line)
        credential.scrubResponses = scrub
        credential.upgradeToHTTPS = upgrade
        credential.layer = layer
        credential.rateLimit = rateLimit
        credential.limits = limits
        credential.allowJSONP = allowJSONP
        credential.intercept = intercept
        credential.printServices = printServices
        if prefetch {
            guard credential.isRefreshable else {
                throw ConfigError(
                    key: entry.path + ".prefetch", line: entry.line(of: "prefetch"),
                    "prefetch applies to credentials that fetch tokens (\(Self.fetchingKinds)), not to \(type)"
                )
            }
            credential.prefetch = true
        }
        if let refresh, !credential.isRefreshable {
            throw ConfigError(
                key: entry.path + ".refresh", line: entry.line(of: "refresh"),
                "refresh = \"\(refresh.rawValue)\" applies to credentials that fetch tokens (\(Self.fetchingKinds)), not to \(type)"
            )
        }
        if credential.isRefreshable { credential.refresh = refresh ?? defaultRefresh }
        if credential.prefetch, credential.refresh == .onDemand {
            // prefetch keeps a token fresh with no request at all; on_demand promises no token traffic then.
            throw ConfigError(
                key: entry.path + (refresh == nil ? ".prefetch" : ".refresh"),
                line: entry.line(of: refresh == nil ? "prefetch" : "refresh"),
                refresh == nil
                    ? "prefetch = true contradicts [proxy] refresh = \"on_demand\" (no token traffic while no request needs the token): set refresh = \"ahead\" on this credential, or drop prefetch"
                    : "prefetch = true and refresh = \"on_demand\" contradict each other (prefetch fetches tokens before any request needs them): drop one"
            )
        }
        return credential
    }

    /// The entries of a host-name list (`[admin] hosts`, `[proxy] pac_hosts`), each through ``hostName(_:)``;
    /// `shown` quotes an entry for the error as the reader would (never a secret's value).
    static func hostNames(
        _ names: (values: [String], line: Int), key: String, example: String, alwaysAccepted: String,
        shown: (String) -> String
    ) throws(ConfigError) -> [String] {
        try names.values.map { (h: String) throws(ConfigError) -> String in
            guard let name = hostName(h) else {
                throw ConfigError(
                    key: key, line: names.line,
                    "\(shown(h)) is not a host name like \(example) (no scheme, port or wildcard; "
                        + "\(alwaysAccepted) are always accepted)")
            }
            return name
        }
    }

    /// `[admin] hosts` entry `text` lowercased when it is a DNS name (letters, digits, hyphens, dots; labels of
    /// 1–63 characters), else nil: no scheme, port, path or wildcard, so the list says exactly what is accepted.
    static func hostName(_ text: String) -> String? {
        let name = text.lowercased()
        guard !name.isEmpty, name.utf8.count <= 253 else { return nil }
        let labels = name.split(separator: ".", omittingEmptySubsequences: false)
        for label in labels {
            guard (1...63).contains(label.utf8.count), label.first != "-", label.last != "-",
                label.utf8.allSatisfy({ ($0 >= 97 && $0 <= 122) || ($0 >= 48 && $0 <= 57) || $0 == 45 })
            else { return nil }
        }
        return name
    }

    public static func processEnvironment() -> [String: String] {
        var env: [String: String] = [:]
        var p = environ
        while let entry = p.pointee {
            let s = String(cString: entry)
            if let eq = s.firstIndex(of: "=") { env[String(s[..<eq])] = String(s[s.index(after: eq)...]) }
            p += 1
        }
        return env
    }
}

/// Reads keys from one table, resolving secret references and remembering which keys were used so
/// ``finish()`` can reject unknown ones.
public struct TableReader {
    let table: TOMLTable
    let path: String
    let env: [String: String]
    /// Where resolved `file:` secrets are recorded (nil: nobody asked).
    let reads: SecretFileReads?
    private var used: Set<String> = []
    /// Keys whose value (or one of whose array items) was read from `file:` or `${ENV}`, with that reference as
    /// written: such a value is never quoted in an error.
    private var references: [String: String] = [:]

    /// Keys that hold secrets: their values are never quoted in an error, even when written literally. Each
    /// credential kind adds its own (``CredentialKind/secretKeys``).
    static let secretKeys: Set<String> = CredentialKinds.all.reduce(into: [
        "key", "token", "password", "client_secret", "key_password", "state_key", "redis", "refresh_token",
    ]) { $0.formUnion($1.secretKeys) }

    /// See ``ConfigLoader/acceptUnfilled``.
    let acceptUnfilled: Bool

    init(
        _ table: TOMLTable, path: String, env: [String: String], reads: SecretFileReads? = nil,
        acceptUnfilled: Bool = false
    ) {
        self.table = table
        self.path = path
        self.env = env
        self.reads = reads
        self.acceptUnfilled = acceptUnfilled
    }

    func key(_ k: String) -> String { path.isEmpty ? k : "\(path).\(k)" }
    func line(of k: String) -> Int? { table[k]?.line }

    mutating func markUsed(_ k: String) { used.insert(k) }

    private mutating func node(_ k: String) -> TOMLNode? {
        used.insert(k)
        return table[k]
    }

    private func typeError(_ k: String, _ n: TOMLNode, expected: String) -> ConfigError {
        ConfigError(key: key(k), line: n.line, "expected \(expected), found \(n.value.typeName)")
    }

    /// How an error shows the value `value` of key `k`: quoted when the operator wrote it literally into a key
    /// that holds no secret; otherwise only where it came from. Someone who may edit the configuration but not
    /// read a secret could otherwise name the secret in a field that quotes what it got and read the error.
    func shown(_ k: String, _ value: String) -> String {
        if let reference = references[k] { return "the value read from \(reference)" }
        if Self.secretKeys.contains(k) { return "the value (a secret, not shown)" }
        return "'\(value)'"
    }

    /// Whether key `k`'s value (or one of its items) came from `file:` or `${ENV}`.
    func isReference(_ k: String) -> Bool { references[k] != nil }

    static func isReference(_ raw: String) -> Bool {
        (raw.hasPrefix("${") && raw.hasSuffix("}") && raw.count > 3) || raw.hasPrefix("file:")
    }

    /// A string that must be written literally: a name shown in logs, metrics and on the status page, where a
    /// value read from a secret would be published.
    mutating func literalString(_ k: String) throws(ConfigError) -> String? {
        if let n = table[k], case .string(let raw) = n.value, Self.isReference(raw) {
            used.insert(k)
            throw ConfigError(
                key: key(k), line: n.line,
                "must be written literally, not read from a file or the environment (it is shown in logs, metrics and on the status page)"
            )
        }
        return try string(k)
    }

    mutating func resolve(_ raw: String, key k: String, line: Int) throws(ConfigError) -> String {
        if Self.isReference(raw), references[k] == nil { references[k] = raw }
        if raw.hasPrefix("${"), raw.hasSuffix("}"), raw.count > 3 {
            let name = String(raw.dropFirst(2).dropLast())
            guard let v = env[name] else {
                if acceptUnfilled { return raw }
                throw ConfigError(key: key(k), line: line, "environment variable \(name) is not set")
            }
            return v
        }
        if raw.hasPrefix("file:") {
            let path = String(raw.dropFirst(5))
            guard let text = readTextFile(path) else {
                throw ConfigError(key: key(k), line: line, "cannot read secret file '\(path)': \(lastErrorString())")
            }
            reads?.record(path: path, contents: text)
            return String(text.trimmingWhitespace())
        }
        return raw
    }

    /// A string taken as written: a location whose own syntax overlaps the secret references (`file:///…`).
    mutating func verbatimString(_ k: String) throws(ConfigError) -> String? {
        guard let n = node(k) else { return nil }
        guard case .string(let s) = n.value else { throw typeError(k, n, expected: "a string") }
        return s
    }

    mutating func string(_ k: String) throws(ConfigError) -> String? {
        guard let n = node(k) else { return nil }
        guard case .string(let s) = n.value else { throw typeError(k, n, expected: "a string") }
        if s.hasPrefix(Self.placeholder), !acceptUnfilled {
            throw ConfigError(
                key: key(k), line: n.line,
                "still the placeholder \(Self.placeholder) that `authproxy doctor` wrote: fill in the real value")
        }
        return try resolve(s, key: k, line: n.line)
    }

    /// What `authproxy doctor` puts where the operator must fill in a value (``CredentialSuggestion/placeholder``).
    static var placeholder: String { CredentialSuggestion.placeholder }

    mutating func int(_ k: String, range: ClosedRange<Int>) throws(ConfigError) -> Int? {
        guard let n = node(k) else { return nil }
        guard case .integer(let v) = n.value else { throw typeError(k, n, expected: "an integer") }
        guard range.contains(Int(v)) else {
            throw ConfigError(key: key(k), line: n.line, "\(v) is outside \(range.lowerBound)…\(range.upperBound)")
        }
        return Int(v)
    }

    mutating func bool(_ k: String) throws(ConfigError) -> Bool? {
        guard let n = node(k) else { return nil }
        guard case .bool(let v) = n.value else { throw typeError(k, n, expected: "true or false") }
        return v
    }

    mutating func enumValue<E: RawRepresentable & CaseIterable>(_ k: String, _: E.Type) throws(ConfigError) -> E?
    where E.RawValue == String {
        guard let s = try string(k) else { return nil }
        guard let v = E(rawValue: s) else {
            throw ConfigError(
                key: key(k), line: line(of: k),
                "\(shown(k, s)) is not one of \(E.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", "))")
        }
        return v
    }

    mutating func stringArray(_ k: String) throws(ConfigError) -> (values: [String], line: Int)? {
        guard let n = node(k) else { return nil }
        guard case .array(let items) = n.value else { throw typeError(k, n, expected: "an array of strings") }
        var out: [String] = []
        for item in items {
            guard case .string(let s) = item.value else { throw typeError(k, item, expected: "an array of strings") }
            out.append(try resolve(s, key: k, line: item.line))
        }
        return (out, n.line)
    }

    /// An array of CIDR blocks (`"10.0.0.0/8"`, `"::1/128"`, or a bare address).
    mutating func addressBlocks(_ k: String) throws(ConfigError) -> [AddressBlock]? {
        guard let list = try stringArray(k) else { return nil }
        return try list.values.map { (s: String) throws(ConfigError) -> AddressBlock in
            guard let b = AddressBlock.parse(s) else {
                throw ConfigError(
                    key: key(k), line: list.line, "\(shown(k, s)) is not a CIDR block like 10.42.0.0/16 or fd00::/8")
            }
            return b
        }
    }

    /// A string or an array of strings.
    mutating func stringOrArray(_ k: String) throws(ConfigError) -> (values: [String], line: Int)? {
        guard let n = table[k] else { return nil }
        if case .string = n.value { return (try string(k).map { [$0] } ?? [], n.line) }
        return try stringArray(k)
    }

    mutating func intArray(_ k: String, range: ClosedRange<Int>) throws(ConfigError) -> [Int]? {
        guard let n = node(k) else { return nil }
        guard case .array(let items) = n.value else { throw typeError(k, n, expected: "an array of integers") }
        return try items.map { (item: TOMLNode) throws(ConfigError) -> Int in
            guard case .integer(let v) = item.value else { throw typeError(k, item, expected: "an array of integers") }
            guard range.contains(Int(v)) else {
                throw ConfigError(
                    key: key(k), line: item.line, "\(v) is outside \(range.lowerBound)…\(range.upperBound)")
            }
            return Int(v)
        }
    }

    mutating func table(_ k: String) throws(ConfigError) -> TableReader? {
        guard let n = node(k) else { return nil }
        guard case .table(let t) = n.value else { throw typeError(k, n, expected: "a table ([\(key(k))])") }
        return TableReader(t, path: key(k), env: env, reads: reads, acceptUnfilled: acceptUnfilled)
    }

    mutating func tableArray(_ k: String) throws(ConfigError) -> [TableReader]? {
        guard let n = node(k) else { return nil }
        guard case .array(let items) = n.value else {
            throw typeError(k, n, expected: "an array of tables ([[\(key(k))]])")
        }
        return try items.enumerated().map { (i, item) throws(ConfigError) -> TableReader in
            guard case .table(let t) = item.value else { throw typeError(k, item, expected: "a table") }
            return TableReader(t, path: "\(key(k))[\(i)]", env: env, reads: reads, acceptUnfilled: acceptUnfilled)
        }
    }

    /// Rejects keys nobody asked for: a typo must not silently fall back to a default.
    func finish() throws(ConfigError) {
        for (k, n) in table.entries where !used.contains(k) {
            throw ConfigError(key: key(k), line: n.line, "unknown key")
        }
    }

    /// The error for a required key `k` that is missing, saying `message`. When the table holds a key not read
    /// yet that is one or two edits away from `k` (`pasword`), that key is named instead, with its line: the
    /// typo is the cause, not the missing key.
    func missing(_ k: String, _ message: String) -> ConfigError {
        let near = table.entries
            .filter { e in !used.contains(e.key) && e.key != k && k.count >= 4 && Self.editDistance(e.key, k) <= 2 }
            .min { $0.node.line < $1.node.line }
        if let near {
            return ConfigError(key: key(near.key), line: near.node.line, "unknown key; did you mean \(k)? (\(message))")
        }
        return ConfigError(key: key(k), line: table.line, message)
    }

    /// Levenshtein distance of two short keys.
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a.utf8), b = Array(b.utf8)
        guard !a.isEmpty else { return b.count }
        var row = Array(0...b.count)
        for i in 1...a.count {
            var previous = row[0]
            row[0] = i
            for j in stride(from: 1, through: b.count, by: 1) {
                let kept = row[j]
                row[j] = min(row[j] + 1, row[j - 1] + 1, previous + (a[i - 1] == b[j - 1] ? 0 : 1))
                previous = kept
            }
        }
        return row[b.count]
    }
}

/// The `file:` secrets one load resolved, in the order read: a reference shared by the copies of
/// ``TableReader`` made while parsing. Used by one load on one thread.
final class SecretFileReads {
    private(set) var files: [(path: String, contents: String)] = []

    func record(path: String, contents: String) { files.append((path, contents)) }
}

extension String {
    /// The string without leading and trailing whitespace.
    func trimmingWhitespace() -> Substring {
        var s = Substring(self)
        while let c = s.first, c.isWhitespace { s.removeFirst() }
        while let c = s.last, c.isWhitespace { s.removeLast() }
        return s
    }
}

/// Reads a whole (small) text file, or nil with errno set.
func readTextFile(_ path: String) -> String? {
    readFileBytes(path).map { String(decoding: $0, as: UTF8.self) }
}

/// The whole file as read (at most 16 MiB), nil (errno set) when it cannot be read.
func readFileBytes(_ path: String) -> [UInt8]? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 16384)
    while true {
        let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n < 0 { if errno == EINTR { continue }; return nil }
        if n == 0 { break }
        bytes.append(contentsOf: chunk[0..<n])
        if bytes.count > 16 * 1024 * 1024 { errno = EFBIG; return nil }
    }
    return bytes
}

func lastErrorString() -> String { String(cString: strerror(errno)) }
