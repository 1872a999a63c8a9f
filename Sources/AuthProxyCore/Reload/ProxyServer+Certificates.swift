import Dispatch
import Logging

/// Certificate files that renew themselves: the client certificates of `certificate` credentials and the CA bundles
/// of `server-trust` credentials are watched all the time (not only with `watch_config`): an operator using
/// cert-manager or a yearly PKI renewal expects a renewed file to be used, with no reload to remember. A renewed
/// file that can be used (``CertificateRenewal``) becomes part of a new configuration generation, installed like a
/// reload's but with nothing else changed (the configuration file is not read again): new connections use it, and
/// pooled connections made with the old one are never handed out again (libcurl keys them by the contents, see
/// ``ClientCertificateMaterial``). A file that cannot be used is logged and the old one stays.
extension ProxyServer {
    /// Starts, updates or stops the certificate watcher to follow the files of the running credentials.
    func updateCertificateWatcher() {
        dispatchPrecondition(condition: .onQueue(reloadQueue))
        let files = CertificateFiles(running: running.credentials)
        certificateFiles = files
        guard !files.isEmpty else {
            certificateWatcher?.stop()
            certificateWatcher = nil
            return
        }
        if let certificateWatcher {
            certificateWatcher.update(files)
            return
        }
        weak let me = self
        certificateWatcher = FileWatcher(inputs: files, label: "certificates", logger: logger) {
            guard let me else { return }
            me.reloadQueue.async { me.renewCertificates() }
        }
        if certificateWatcher != nil {
            logger.info("watching certificate files for renewal", metadata: ["files": "\(files.paths.count)"])
        }
    }

    /// Some certificate file changed: the credentials naming it look at their files again.
    func renewCertificates() {
        dispatchPrecondition(condition: .onQueue(reloadQueue))
        guard current != nil, let before = certificateFiles else { return }
        let now = before.rereadFromDisk()
        let changed = now.changed(comparedTo: before)
        certificateFiles = now
        guard !changed.isEmpty else { return }
        let outcome = CertificateRenewal.renew(running.credentials, changed: changed)
        // Installed before it is logged: a line saying a certificate was taken means new requests use it.
        if let credentials = outcome.credentials { install(renewed: credentials) }
        for event in outcome.events {
            switch event {
            case .certificateRenewed(let name, let notAfter):
                logger.notice(
                    "renewed client certificate taken: new connections present it",
                    metadata: [
                        "credential": "\(name)", "not_after": "\(notAfter.map { rfc3339(millis: $0) } ?? "-")",
                    ])
            case .caRenewed(let name, let file):
                logger.notice(
                    "renewed CA bundle taken: new connections are verified with it",
                    metadata: ["credential": "\(name)", "file": "\(file)"])
            case .refused(let name, let file, let cause):
                logger.error(
                    "renewed certificate file not taken: still using the one loaded before",
                    metadata: ["credential": "\(name)", "file": "\(file)", "cause": "\(cause)"])
            }
        }
        guard let credentials = outcome.credentials else { return }
        let renewed = Set(
            outcome.events.compactMap { e -> String? in
                if case .certificateRenewed(let name, _) = e { return name }
                return nil
            })
        logCertificateExpiries(credentials.filter { renewed.contains($0.name) })
    }

    /// A new generation with `credentials` (the running configuration otherwise unchanged), like a reload's.
    private func install(renewed credentials: [Credential]) {
        var next = running
        next.credentials = credentials
        running = next
        // The token service makes its own requests with the network credentials (an oauth2 tls_client_auth token
        // request presents the certificate): same identities, so no token is dropped.
        tokens?.update(credentials: credentials)
        let context = ServerContext(
            generation: current.generation + 1, config: next, logger: logger, ownAuthorities: current.ownAuthorities,
            tokens: tokens, tlsServer: current.tlsServer, proxyTLS: current.proxyTLS, shared: current.shared)
        current = context
        tokens?.use(routing: context.routing)
        for loop in loops { loop.queue.async { loop.install(context) } }
        for l in listeners { l.install(context.access) }
        // Every loop has the new generation before this returns (and so before the line saying so).
        for loop in loops { loop.queue.sync {} }
    }

    /// One warning per client certificate of `credentials` that expires within `expiry_warning_days` (or has).
    func logCertificateExpiries(_ credentials: [Credential]) {
        let now = nowMillis()
        for c in credentials {
            guard let warning = CertificateRenewal.expiryWarning(c, now: now, warningDays: running.expiryWarningDays)
            else { continue }
            logger.warning("\(warning)", metadata: ["credential": "\(c.name)"])
        }
    }
}
