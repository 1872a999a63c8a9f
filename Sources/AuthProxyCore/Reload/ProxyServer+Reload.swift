import Dispatch
import Logging

/// Live configuration reload: SIGHUP, `POST /reload` on the admin listener and `[proxy] watch_config` all end in
/// ``ProxyServer/reload(trigger:)``.
///
/// The new configuration is loaded and validated completely before anything changes (the same loader as at
/// start, the open-relay check, the interception CA, a new token service, a new Kerberos ticket). Then a new
/// ``ServerContext`` generation is built around the process-wide live state (``SharedServerState``, the
/// ``TokenService``, an unchanged ``TLSServer``) and installed on every loop and listener. Exchanges in flight
/// keep the generation they began with; idle keep-alive connections take the new one with their next request.
extension ProxyServer {
    /// Reloads the configuration file the server was started from; thread-safe, callable from any queue
    /// (reloads run one at a time). Returns when the new generation is installed or the file was rejected; one
    /// log line says which (the old configuration stays in force on rejection).
    @discardableResult
    public func reload(trigger: ReloadResult.Trigger) -> ReloadResult {
        reloadQueue.sync { reloadNow(trigger: trigger) }
    }

    private func reloadNow(trigger: ReloadResult.Trigger) -> ReloadResult {
        dispatchPrecondition(condition: .onQueue(reloadQueue))
        guard current != nil else {
            return rejected(trigger, 0, ConfigError(key: "", line: nil, "the server has not started yet"))
        }
        let generation = current.generation
        guard let source else {
            return rejected(
                trigger, generation,
                ConfigError(key: "", line: nil, "the server was not started from a configuration file"))
        }
        let loaded: (config: ProxyConfig, inputs: ConfigInputs)
        do {
            loaded = try source.load()
        } catch {
            return rejected(trigger, generation, error)
        }
        // From here on the inputs are known even if the result is rejected: the watcher compares against them.
        inputs = loaded.inputs
        let diff = ConfigDiff(running: running, loaded: loaded.config)
        let next = diff.effective

        // Everything that can fail, before anything is replaced.
        var tlsServer = current.tlsServer
        var tlsDigest = self.tlsDigest
        if next.tls != running.tls
            || (next.tls.enabled && Self.digest(files: [next.tls.caCert!, next.tls.caKey!]) != tlsDigest)
        {
            do {
                (tlsServer, tlsDigest) = try makeTLSServer(next)
            } catch {
                return rejected(trigger, generation, ConfigError(key: "tls", line: nil, error.description))
            }
        }
        let proxyTLS: ProxyTLSServer?
        do {
            proxyTLS = try makeProxyTLS(next, interception: tlsServer)
        } catch {
            return rejected(trigger, generation, ConfigError(key: "proxy.tls_cert", line: nil, error.description))
        }
        var tokens = self.tokens
        var tokensCreated = false
        if tokens == nil, !next.credentials.isEmpty {
            do {
                tokens = try makeTokenService(next)
                tokensCreated = true
            } catch {
                return rejected(trigger, generation, ConfigError(key: "proxy.state_dir", line: nil, error.description))
            }
        }
        var kerberos = self.kerberos
        let kerberosSettings = Self.kerberosSettings(next)
        if kerberosSettings != self.kerberos?.settings {
            if let k = kerberosSettings {
                let tickets = KerberosTickets(settings: k, stateDir: next.stateDir, logger: logger)
                do {
                    try tickets.start()
                } catch {
                    return rejected(trigger, generation, ConfigError(key: "credential", line: nil, error.description))
                }
                kerberos = tickets
            } else {
                kerberos = nil
            }
        }

        // Commit: nothing below fails.
        if kerberos !== self.kerberos {
            self.kerberos?.stop()
            self.kerberos = kerberos
        }
        // The token service's requests take the reloaded upstream_timeout_seconds too (it outlives reloads).
        if !tokensCreated { tokens?.update(credentials: next.credentials, timeoutSeconds: next.upstreamTimeoutSeconds) }
        // Prefetching follows: stopped for removed and changed credentials, started for changed and added ones
        // (one already running with the same settings goes on).
        tokens?.stopPrefetching(diff.removed + diff.changed)
        tokens?.startPrefetching(next.credentials)
        self.tokens = tokens
        self.tlsDigest = tlsDigest
        let shared = current.shared
        shared.connections.setLimits(total: next.maxConnections, perClient: next.effectiveMaxConnectionsPerClient)
        if let logLevel, source.overrides.logLevel == nil { logLevel.level = next.logLevel }
        let context = ServerContext(
            generation: generation + 1, config: next, logger: logger, ownAuthorities: current.ownAuthorities,
            tokens: tokens, tlsServer: tlsServer, proxyTLS: proxyTLS, shared: shared)
        current = context
        tokens?.use(routing: context.routing)
        // The PAC file is read again on every reload (the file or the server may have changed with the rest).
        if next.upstreamProxy.pac != nil || running.upstreamProxy.pac != nil {
            shared.pac.configure(
                next.upstreamProxy.pac, refreshSeconds: next.upstreamProxy.pacRefreshSeconds,
                timeoutSeconds: next.upstreamTimeoutSeconds, evaluationSeconds: next.upstreamProxy.pacTimeoutSeconds,
                logger: logger)
        }
        running = next
        // Each loop swaps on its own queue, so no exchange ever sees a half-installed generation and the
        // request path needs no lock: a request read after this line (any event handled after these blocks)
        // uses the new one.
        for loop in loops { loop.queue.async { loop.install(context) } }
        for l in listeners { l.install(context.access) }
        if let a = next.admin { admin?.update(allow: a.allow, hosts: a.hosts) }
        updateWatcher()
        updateCertificateWatcher()

        let result = ReloadResult(trigger: trigger, outcome: .applied(diff), generation: context.generation)
        record(result)
        var meta: Logger.Metadata = [
            "trigger": "\(trigger.rawValue)", "generation": "\(context.generation)", "file": "\(source.path)",
        ]
        if !diff.added.isEmpty { meta["added"] = "\(diff.added.joined(separator: ","))" }
        if !diff.changed.isEmpty { meta["changed"] = "\(diff.changed.joined(separator: ","))" }
        if !diff.removed.isEmpty { meta["removed"] = "\(diff.removed.joined(separator: ","))" }
        if !diff.kept.isEmpty { meta["kept"] = "\(diff.kept.joined(separator: ","))" }
        if !diff.retuned.isEmpty { meta["retuned"] = "\(diff.retuned.joined(separator: ","))" }
        if !diff.live.isEmpty { meta["settings"] = "\(diff.live.joined(separator: ","))" }
        if !diff.restartNeeded.isEmpty {
            meta["needs_restart"] = "\(diff.restartNeeded.map(\.key).joined(separator: ","))"
        }
        logger.notice(diff.isEmpty ? "configuration reloaded (no changes)" : "configuration reloaded", metadata: meta)
        for r in diff.restartNeeded {
            logger.warning(
                "configuration change needs a restart: still running with the old value",
                metadata: [
                    "setting": "\(r.key)", "running": "\(r.running)", "configured": "\(r.configured)",
                ])
        }
        let before = Set(diff.kept)
        warnInsecure(next.credentials.filter { !before.contains($0.name) })
        logCertificateExpiries(next.credentials.filter { !before.contains($0.name) })
        tokens?.warnKeyExpiry(next.credentials, warningDays: next.expiryWarningDays)
        return result
    }

    private func rejected(_ trigger: ReloadResult.Trigger, _ generation: Int, _ error: ConfigError) -> ReloadResult {
        var meta: Logger.Metadata = ["trigger": "\(trigger.rawValue)", "error": "\(error.message)"]
        if let source { meta["file"] = "\(source.path)" }
        if !error.key.isEmpty { meta["key"] = "\(error.key)" }
        if let line = error.line { meta["line"] = "\(line)" }
        logger.error("configuration reload rejected; the running configuration stays in force", metadata: meta)
        let result = ReloadResult(trigger: trigger, outcome: .rejected(error.description), generation: generation)
        record(result)
        return result
    }

    /// The outcome for the status page and `authproxy_config_reloads_total`.
    private func record(_ result: ReloadResult) {
        ProxyMetrics.active?.reload(applied: result.applied)
        lastReload = StatusReport.Reload(
            at: rfc3339(millis: nowMillis()), applied: result.applied,
            message: "\(result.trigger.rawValue): \(result.description)")
    }

    /// Starts, updates or stops the file watcher to match `[proxy] watch_config`.
    func updateWatcher() {
        dispatchPrecondition(condition: .onQueue(reloadQueue))
        guard running.watchConfig, let inputs else {
            watcher?.stop()
            watcher = nil
            return
        }
        if let watcher {
            watcher.update(inputs)
            return
        }
        weak let me = self
        watcher = ConfigWatcher(inputs: inputs, logger: logger) {
            me?.reload(trigger: .fileChange)
        }
        if watcher != nil {
            logger.notice("watching the configuration for changes", metadata: ["files": "\(inputs.paths.count)"])
        }
    }
}
