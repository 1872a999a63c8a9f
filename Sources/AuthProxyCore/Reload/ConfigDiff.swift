/// What a reload changes: the credentials added, changed, removed and kept, the settings that take effect
/// live, and the settings that only a restart can change. Pure: built from the running and the newly loaded
/// configuration, with no I/O.
///
/// - A credential is **changed** when its identity (``Credential/identityMaterial``: type, match prefixes and
///   every setting that obtains a token, secrets included) differs: its cached tokens are dropped. A credential
///   whose identity is the same is **kept** with its tokens, even if settings that do not affect a token
///   changed (`token_placement`, `rate_limit`, `upgrade_to_https`, `allow_jsonp`, `override_client_token`,
///   `prefetch`, `refresh`, `intercept`: listed in ``retuned``).
/// - **Restart needed**: `[proxy] listen`, `workers`, `state_dir`, `state_key`, `[admin] listen` and
///   `[log] format` keep their running values (``effective``), and each change is reported.
public struct ConfigDiff: Sendable, Equatable {
    /// A setting whose new value needs a restart; values are shown as written, or as "(changed)" for secrets.
    public struct RestartSetting: Sendable, Equatable, CustomStringConvertible {
        public var key: String
        public var running: String
        public var configured: String

        public var description: String { "\(key): running \(running), configured \(configured)" }
    }

    public var added: [String] = []
    public var changed: [String] = []
    public var removed: [String] = []
    /// Unchanged identity: tokens kept (includes ``retuned``).
    public var kept: [String] = []
    /// Kept credentials whose other settings changed (they apply to new requests).
    public var retuned: [String] = []
    /// Settings (as `section.key`) whose new value applies to new requests and connections.
    public var live: [String] = []
    public var restartNeeded: [RestartSetting] = []
    /// The configuration to run: the new one, with the running value of every setting that needs a restart.
    public var effective: ProxyConfig

    public init(running old: ProxyConfig, loaded new: ProxyConfig) {
        effective = new
        let before = Dictionary(old.credentials.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
        let after = Set(new.credentials.map(\.name))
        for c in new.credentials {
            guard let o = before[c.name] else {
                added.append(c.name)
                continue
            }
            if o.identityMaterial != c.identityMaterial {
                changed.append(c.name)
            } else {
                kept.append(c.name)
                if !Self.sameBehaviour(o, c) { retuned.append(c.name) }
            }
        }
        removed = old.credentials.map(\.name).filter { !after.contains($0) }

        func restart(_ key: String, _ running: String, _ configured: String) {
            restartNeeded.append(RestartSetting(key: key, running: running, configured: configured))
        }
        if old.listen != new.listen {
            restart("proxy.listen", Self.list(old.listen), Self.list(new.listen))
            effective.listen = old.listen
        }
        if old.workers != new.workers {
            restart("proxy.workers", "\(old.workers)", "\(new.workers)")
            effective.workers = old.workers
        }
        if old.stateDir != new.stateDir {
            restart("proxy.state_dir", old.stateDir, new.stateDir)
            effective.stateDir = old.stateDir
        }
        if old.stateKey != new.stateKey {
            // A secret: say that it changed, never what it is.
            restart(
                "proxy.state_key", old.stateKey == nil ? "(none)" : "(set)",
                new.stateKey == nil ? "(none)" : "(changed)")
            effective.stateKey = old.stateKey
        }
        if old.cluster != new.cluster {
            // The URL may carry a password: only whether the section is there and where it points.
            restart(
                "cluster", old.cluster.map { $0.endpoint.redacted } ?? "(off)",
                new.cluster.map {
                    $0.endpoint.redacted
                        + (old.cluster?.endpoint.redacted == $0.endpoint.redacted ? " (settings changed)" : "")
                } ?? "(off)")
            effective.cluster = old.cluster
        }
        if old.admin?.listen != new.admin?.listen {
            restart(
                "admin.listen", old.admin.map { "\($0.listen)" } ?? "(off)", new.admin.map { "\($0.listen)" } ?? "(off)"
            )
            if let running = old.admin {
                if effective.admin == nil {
                    effective.admin = running
                } else {
                    effective.admin?.listen = running.listen
                }
            } else {
                effective.admin = nil
            }
        }
        if old.tracing != new.tracing {
            // The exporter and the sampler are set up once at start; the endpoint may carry nothing secret, the
            // headers may: only whether it is on and where it sends.
            restart(
                "tracing", old.tracing?.redactedEndpoint ?? "(off)",
                new.tracing.map {
                    $0.redactedEndpoint + (old.tracing?.endpoint == $0.endpoint ? " (settings changed)" : "")
                }
                    ?? "(off)")
            effective.tracing = old.tracing
        }
        if old.logFormat != new.logFormat {
            restart("log.format", old.logFormat.rawValue, new.logFormat.rawValue)
            effective.logFormat = old.logFormat
        }

        func note(_ key: String, _ differs: Bool) { if differs { live.append(key) } }
        note("proxy.connect_ports", old.connectPorts != new.connectPorts)
        note("proxy.unmatched", old.unmatched != new.unmatched)
        note("proxy.upstream_timeout_seconds", old.upstreamTimeoutSeconds != new.upstreamTimeoutSeconds)
        note("proxy.header_timeout_seconds", old.headerTimeoutSeconds != new.headerTimeoutSeconds)
        note("proxy.idle_timeout_seconds", old.idleTimeoutSeconds != new.idleTimeoutSeconds)
        note("proxy.shutdown_grace_seconds", old.shutdownGraceSeconds != new.shutdownGraceSeconds)
        note("proxy.tunnel_idle_timeout_seconds", old.tunnelIdleTimeoutSeconds != new.tunnelIdleTimeoutSeconds)
        note("proxy.max_connections", old.maxConnections != new.maxConnections)
        note(
            "proxy.max_connections_per_client",
            old.effectiveMaxConnectionsPerClient != new.effectiveMaxConnectionsPerClient)
        note("proxy.allow_clients", old.allowClients != new.allowClients)
        note("proxy.deny_destinations", old.denyDestinations != new.denyDestinations)
        note("proxy.allowed_origins", old.allowedOrigins != new.allowedOrigins)
        note("app", old.apps != new.apps)
        note("proxy.max_replay_bytes", old.maxReplayBytes != new.maxReplayBytes)
        note("proxy.watch_config", old.watchConfig != new.watchConfig)
        note("proxy.upstream_retries", old.upstreamRetries != new.upstreamRetries)
        note("proxy.max_retry_wait_seconds", old.maxRetryWaitSeconds != new.maxRetryWaitSeconds)
        note("proxy.retry_budget_percent", old.retryBudgetPercent != new.retryBudgetPercent)
        note("proxy.get_as_post_above_bytes", old.getAsPostAboveBytes != new.getAsPostAboveBytes)
        note("proxy.http_client", old.httpClient != new.httpClient)
        note("proxy.upstream_proxy", old.upstreamProxy.parents != new.upstreamProxy.parents)
        note("proxy.upstream_proxy_credential", old.upstreamProxy.credentialName != new.upstreamProxy.credentialName)
        note("proxy.no_proxy", old.upstreamProxy.noProxy != new.upstreamProxy.noProxy)
        note(
            "proxy.upstream_proxy_backoff_seconds", old.upstreamProxy.backoffSeconds != new.upstreamProxy.backoffSeconds
        )
        note("proxy.upstream_proxy_ca", old.upstreamProxy.caFile != new.upstreamProxy.caFile)
        note("proxy.pac_address", old.pacAddress != new.pacAddress)
        note("proxy.pac_hosts", old.pacHosts != new.pacHosts)
        note("proxy.pac_fallback", old.pacFallback != new.pacFallback)
        note("log.level", old.logLevel != new.logLevel)
        note("admin.allow", old.admin != nil && new.admin != nil && old.admin?.allow != new.admin?.allow)
        note("admin.hosts", old.admin != nil && new.admin != nil && old.admin?.hosts != new.admin?.hosts)
        note("admin.capture", old.admin != nil && new.admin != nil && old.admin?.capture != new.admin?.capture)
        note("tls", old.tls != new.tls)
        note("proxy.tls_cert", old.tlsCert != new.tlsCert || old.tlsKey != new.tlsKey)
        // Client passwords are compared by their per-process fingerprints (never by value).
        note(
            "client",
            old.clients.map { "\($0.name)\u{0}\($0.credentials ?? [])\u{0}\($0.fingerprint)" }
                != new.clients.map { "\($0.name)\u{0}\($0.credentials ?? [])\u{0}\($0.fingerprint)" })
    }

    /// Whether anything at all differs (a reload of an identical file reports "no changes").
    public var isEmpty: Bool {
        added.isEmpty && changed.isEmpty && removed.isEmpty && retuned.isEmpty && live.isEmpty && restartNeeded.isEmpty
    }

    /// Everything but the identity: the settings of its kind that obtain no token (a password credential's
    /// `schemes` and `allow_basic_over_http`, a certificate's key password, …) and the request-side settings.
    private static func sameBehaviour(_ a: Credential, _ b: Credential) -> Bool {
        a.kind.isSame(as: b.kind) && a.placement == b.placement && a.overrideClientToken == b.overrideClientToken
            && a.upgradeToHTTPS == b.upgradeToHTTPS
            && a.rateLimit == b.rateLimit && a.allowJSONP == b.allowJSONP && a.prefetch == b.prefetch
            && a.refresh == b.refresh
            && a.intercept == b.intercept && a.printServices == b.printServices
    }

    private static func list(_ l: [ListenAddress]) -> String { l.map(\.description).joined(separator: ",") }

    public static func == (a: ConfigDiff, b: ConfigDiff) -> Bool {
        a.added == b.added && a.changed == b.changed && a.removed == b.removed && a.kept == b.kept
            && a.retuned == b.retuned && a.live == b.live && a.restartNeeded == b.restartNeeded
    }
}
