import Dispatch
import Foundation

/// What the admin listener reads from the running proxy: readiness, the status report, the metrics exposition.
/// Runs on the admin queue; the per-loop figures are read on each loop's queue.
extension ProxyServer: AdminBackend {
    private var listenerStates: [StatusReport.Listener] {
        let open = !stopping.load(ordering: .relaxed)
        return listeners.map { l in
            let host = l.address.isIPv6 ? "[\(l.address.host)]" : l.address.host
            return StatusReport.Listener(address: "\(host):\(l.boundPort)", open: open)
        }
    }

    /// Client connections and blind tunnels open now, over every loop.
    private func liveCounts() -> (connections: Int, tunnels: Int) {
        loops.reduce((0, 0)) { sum, loop in
            let (c, t) = loop.queue.sync { (loop.connectionCount, loop.tunnelCount) }
            return (sum.0 + c, sum.1 + t)
        }
    }

    /// The generation in force, its token service and the last reload (read on `reloadQueue`, which owns them).
    private func snapshot() -> (context: ServerContext, tokens: TokenService?, lastReload: StatusReport.Reload?) {
        reloadQueue.sync { (current, tokens, lastReload) }
    }

    func readiness() -> Readiness {
        let s = snapshot()
        return readiness(s.context, s.tokens)
    }

    private func readiness(_ context: ServerContext, _ tokens: TokenService?) -> Readiness {
        let config = context.config
        return Readiness.evaluate(
            listeners: listenerStates, shuttingDown: shutdownBegun.load(ordering: .relaxed),
            prefetch: TokenService.prefetchKeys(config.credentials),
            pac: config.upstreamProxy.pac == nil ? nil : context.shared.pac.snapshot,
            cluster: tokens?.clusterStatus
        ) { key in tokens?.status(key: key) }
    }

    var quitquitquitEnabled: Bool { snapshot().context.config.admin?.quitquitquit == true }

    func requestShutdown(trigger: String) {
        guard let handler = shutdownHandler.withLock({ $0 }) else { return }
        handler(trigger)
    }

    func pacInputs() -> (settings: PacEndpoint.Settings, listeners: [ListenAddress]) {
        let settings = snapshot().context.pac
        return (settings, listeners.map { ListenAddress(host: $0.address.host, port: $0.boundPort) })
    }

    func reload(trigger: String) -> (applied: Bool, message: String) {
        let r = reload(trigger: .admin)
        return (r.applied, r.description)
    }

    func metricsExposition() -> [UInt8] {
        guard let m = ProxyMetrics.active else { return [] }
        // Gauges of live state are read when scraped, not kept up to date per connection.
        let (connections, tunnels) = liveCounts()
        m.clientConnections.set(Int64(connections))
        m.tunnels.set(Int64(tunnels))
        guard let (context, tokens) = reloadQueue.sync(execute: { current.map { ($0, tokens) } }) else {
            return m.exposition()
        }
        let parents = context.shared.parents.snapshot(configured: context.config.upstreamProxy.parents)
        let expiries = credentialExpiries(context, tokens, statuses: tokens?.status() ?? [])
        var kinds = ""
        for kind in CredentialKinds.all {
            let own = context.config.credentials.filter { type(of: $0.kind).typeName == kind.typeName }
            if !own.isEmpty { kinds += kind.scrapeText(own, tokens: tokens) }
        }
        return m.exposition() + Array(ParentMetricsText.render(parents).utf8)
            + Array(CredentialExpiryText.render(expiries).utf8) + Array(kinds.utf8)
            + Array(UpstreamLimitMetricsText.render(context.shared.upstreamLimiter.snapshot()).utf8)
    }

    /// Everything of the configured credentials that lapses by itself (``CredentialExpiry``), from whoever holds
    /// it: access tokens from the token service's status.
    private func credentialExpiries(_ context: ServerContext, _ tokens: TokenService?, statuses: [TokenStatus])
        -> [CredentialExpiry]
    {
        var list: [CredentialExpiry] = []
        for s in statuses {
            guard let e = s.expires else { continue }
            list.append(CredentialExpiry(credential: s.credential, what: .accessToken, which: s.root, expires: e))
        }
        list += tokens?.signInExpiries() ?? []
        for c in context.config.credentials { list += c.kind.expiries(credential: c.name) }
        return CredentialExpiry.ordered(list)
    }

    func statusReport() -> StatusReport {
        let now = nowMillis()
        let (connections, tunnels) = liveCounts()
        let (context, tokens, lastReload) = snapshot()
        let config = context.config
        let readiness = readiness(context, tokens)
        let statuses = tokens?.status() ?? []
        let activity = ProxyMetrics.active?.activity.withLock { $0 } ?? CredentialActivity()
        let expiries = credentialExpiries(context, tokens, statuses: statuses)
        let credentials = config.credentials.map { c -> StatusReport.Credential in
            let a = activity.of(c.name)
            let views = statuses.filter { $0.credential == c.name }.map { s in
                StatusReport.TokenView(
                    root: s.root, state: s.state.rawValue,
                    validUntil: s.expires.map { rfc3339(millis: $0) },
                    expiresInSeconds: s.expires.map { ($0 - now) / 1000 },
                    lastRefresh: s.issued.flatMap { $0 > 0 ? rfc3339(millis: $0) : nil },
                    lastError: s.lastError, nextRetry: s.retryAt.map { rfc3339(millis: $0) })
            }
            let lapses = expiries.filter { $0.credential == c.name }.map { e in
                StatusReport.Expiry(
                    what: e.what.rawValue, which: e.which, expires: rfc3339(millis: e.expires),
                    expiresInSeconds: (e.expires - now) / 1000,
                    dueSoon: e.isDueSoon(now: now, warningDays: config.expiryWarningDays),
                    renews: e.renews.map { rfc3339(millis: $0) }, lastError: e.problem)
            }
            return StatusReport.Credential(
                name: c.name, type: c.kind.typeName, match: c.match.map(\.description),
                prefetch: c.prefetch, tokens: views, requestsLast5Min: a.requests.total(now: now),
                rejectionsLast5Min: a.rejections.total(now: now), rateLimitedLast5Min: a.rateLimited.total(now: now),
                rateLimitedTotal: a.rateLimitedTotal,
                lastTokenRequest: a.lastTokenRequestAt.map { rfc3339(millis: $0) },
                lastTokenRequestSucceeded: a.lastTokenRequestAt == nil ? nil : a.lastTokenRequestSucceeded,
                networkAuth: a.networkAuth.values.sorted { $0.scheme < $1.scheme }.map { o in
                    StatusReport.NetworkAuth(
                        scheme: o.scheme, successes: o.successes, failures: o.failures,
                        last: o.lastAt > 0 ? rfc3339(millis: o.lastAt) : nil, lastSucceeded: o.lastSucceeded)
                }, expiries: lapses,
                keySlots: (tokens?.apiKeySlotStates(c) ?? []).map { k in
                    StatusReport.KeySlot(
                        slot: k.slot, state: k.state.rawValue, rejectedAt: k.rejectedAt.map { rfc3339(millis: $0) })
                }, tokenSource: c.kind.tokenSource.statusName,
                details: c.kind.statusDetails.map { StatusReport.Detail(name: $0.0, value: $0.1) })
        }
        let started = ProxyMetrics.active?.startedAt ?? now
        var report = StatusReport(
            version: AuthProxyVersion.string, startedAt: rfc3339(millis: started),
            uptimeSeconds: (now - started) / 1000, workers: loops.count, cpus: CPUBudget.current.description,
            generatedAt: rfc3339(millis: now), ready: readiness.ready,
            notReadyBecause: readiness.reasons, listeners: listenerStates, clientConnections: connections,
            tunnels: tunnels, credentials: credentials,
            interception: context.tlsServer.map { t in
                StatusReport.Interception(
                    caSubject: t.minter.ca.subject,
                    caExpires: t.minter.ca.notAfterMillis.map { rfc3339(millis: $0) },
                    certificatesMinted: t.minter.mintedCount)
            },
            lastReload: lastReload,
            parents: context.shared.parents.snapshot(configured: config.upstreamProxy.parents).map { s in
                StatusReport.Parent(
                    url: s.parent.url, requests: s.stats.requests,
                    failures: Dictionary(uniqueKeysWithValues: s.stats.failures.map { ($0.key.rawValue, $0.value) }),
                    inBackoff: s.inBackoff)
            })
        report.limits = StatusReport.limits(
            context.shared.upstreamLimiter.snapshot(), credentials: config.credentials,
            quotas: context.shared.dailyQuotas, fleet: context.shared.fleet)
        if let c = tokens?.clusterStatus {
            report.cluster = StatusReport.Cluster(
                redis: c.redis, connected: c.connected, required: c.required,
                since: c.since > 0 ? rfc3339(millis: c.since) : nil, problem: c.problem)
        }
        if let f = context.shared.fleet?.status, config.credentials.contains(where: \.sharedByFleet) {
            report.cluster?.limits = f.fallback ? "fallback" : "shared"
            report.cluster?.limitsSince = f.since > 0 ? rfc3339(millis: f.since) : nil
            report.cluster?.limitsProblem = f.fallback ? f.cause : nil
            report.cluster?.replicas = f.replicas
        }
        return report
    }

    func statusJSON() -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(statusReport()) else { return "{}" }
        return String(decoding: data, as: UTF8.self) + "\n"
    }
}
