import CAuthProxyShims
import Dispatch
import Logging
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The proxy: listeners, event loops, live configuration reload and graceful shutdown.
///
/// Ownership: `start()` runs once on the caller's thread before any other use. After that, the listeners and
/// loops are only read (`shutdown` reads them from the signal queue and hands all work to each loop's own
/// queue), and everything a reload replaces (the current generation, the running configuration, the Kerberos
/// tickets, the watcher) is touched only on `reloadQueue`, so sharing the server across queues is safe.
public final class ProxyServer: @unchecked Sendable {
    let logger: Logger
    /// Where a reload reads the configuration; nil: the server was given a configuration, not a file.
    let source: ConfigSource?
    /// The level of every logger, when logging was set up with it (a reload applies `[log] level`).
    let logLevel: LiveLogLevel?
    private(set) var loops: [EventLoop] = []
    private(set) var listeners: [Listener] = []
    /// Serialises reloads; owns every member below.
    let reloadQueue = ProxyQueue.make("authproxy.reload")
    /// The configuration in force (the file's, with the running value of settings that need a restart).
    var running: ProxyConfig
    /// What the running configuration was read from (nil without a ``source``).
    var inputs: ConfigInputs?
    var current: ServerContext!
    var tokens: TokenService?
    var kerberos: KerberosTickets?
    /// SHA-256 of the interception CA's certificate and key files as loaded (a reload keeps the ``TLSServer``
    /// and its minted leaves while they are the same).
    var tlsDigest: String?
    var watcher: ConfigWatcher?
    /// Follows the certificate and CA files of the running credentials, always (``CertificateRenewal``).
    var certificateWatcher: FileWatcher<CertificateFiles>?
    /// Those files as the running credentials were loaded from.
    var certificateFiles: CertificateFiles?
    /// The last reload's outcome, for the status page (touched on `reloadQueue`).
    var lastReload: StatusReport.Reload?
    /// The `[admin]` listener, when configured (its address needs a restart to change).
    private(set) var admin: AdminServer?
    /// Set by ``shutdown(grace:done:)`` when the listeners stop.
    let stopping = Atomic<Bool>(false)
    /// Set when a shutdown begins, before `min_shutdown_delay_seconds`: `/readyz` answers 503 from then on.
    let shutdownBegun = Atomic<Bool>(false)
    /// What `POST /quitquitquit` calls: the command's SIGTERM handling (``onShutdownRequest(_:)``).
    let shutdownHandler = Mutex<(@Sendable (String) -> Void)?>(nil)

    /// `source` and `inputs`: the file `config` was loaded from (by ``ConfigSource/load()``), which a reload
    /// reads again; `logLevel`: the shared level the logging system was set up with.
    public init(
        config: ProxyConfig, logger: Logger, source: ConfigSource? = nil, inputs: ConfigInputs? = nil,
        logLevel: LiveLogLevel? = nil
    ) {
        self.running = config
        self.logger = logger
        self.source = source
        self.inputs = inputs
        self.logLevel = logLevel
    }

    /// One-time process set-up: OpenSSL without its atexit handler, libcurl, no SIGPIPE, and large buffers given
    /// straight back to the system when freed.
    public static func initializeLibraries() {
        signal(SIGPIPE, SIG_IGN)
        // Large buffers go straight back to the system when freed: see ``MallocTuning`` (one rule for the soak's RSS
        // creep and for idle connections that once streamed to a slow reader, ~60-90 KB each before).
        MallocTuning.apply()
        if ap_global_init() != 0 { fatalError("curl_global_init failed") }
    }

    /// The ports actually bound, in `listen` order (useful with port 0).
    public var boundPorts: [Int] { listeners.map(\.boundPort) }

    public func start() throws(ServerError) {
        let config = running
        // Metrics are collected only when something can read them (see ``ProxyMetrics``).
        if config.admin != nil { ProxyMetrics.enable() }
        // Before any loop or token request runs: a span is started only where the tracer is set.
        if let t = config.tracing { ProxyTracing.bootstrap(t, logger: logger) }
        var own: Set<String> = []
        for a in config.listen {
            let host = a.isIPv6 ? "[\(a.host)]" : a.host
            own.insert("\(host):\(a.port)")
            if a.host == "127.0.0.1" { own.insert("localhost:\(a.port)") }
        }
        if !config.credentials.isEmpty {
            tokens = try makeTokenService(config)
        }
        let (tlsServer, digest) = try makeTLSServer(config)
        tlsDigest = digest
        if tlsServer != nil {
            logger.notice("HTTPS interception on for matched hosts", metadata: ["ca": "\(config.tls.caCert ?? "")"])
        }
        let proxyTLS = try makeProxyTLS(config, interception: tlsServer)
        if let proxyTLS {
            logger.notice("the proxy listener serves TLS too", metadata: ["certificate": "\(proxyTLS.source.summary)"])
        }
        if let k = Self.kerberosSettings(config) {
            let tickets = KerberosTickets(settings: k, stateDir: config.stateDir, logger: logger)
            try tickets.start()
            kerberos = tickets
        }
        warnInsecure(config.credentials)
        tokens?.warnKeyExpiry(config.credentials, warningDays: config.expiryWarningDays)
        if config.pacAddress == nil, let wildcard = config.listen.first(where: \.isWildcard) {
            logger.warning(
                "the PAC file (/proxy.pac) names the proxy by the Host it was fetched with: listening on a wildcard address, that may be a name or address not every client can reach",
                metadata: [
                    "listen": "\(wildcard)", "hint": "set [proxy] pac_address to the host:port clients should use",
                ])
        }
        for c in config.credentials {
            for prefix in TokenService.unprefetchable(c) {
                logger.warning(
                    "prefetch cannot fetch a token ahead for a match that is a host alone; /readyz does not wait for it",
                    metadata: [
                        "credential": "\(c.name)", "match": "\(prefix)",
                        "hint": "give the server root or portal, e.g. \(prefix)/arcgis",
                    ])
            }
        }
        DescriptorExhaustion.prepare(maxConnections: config.maxConnections, logger: logger)
        let context = ServerContext(
            generation: 1, config: config, logger: logger, ownAuthorities: own, tokens: tokens, tlsServer: tlsServer,
            proxyTLS: proxyTLS, shared: SharedServerState(config: config, logger: logger))
        current = context
        tokens?.use(routing: context.routing)
        warnParentBasic(config)
        startPac(config, shared: context.shared)
        loops = (0..<config.workers).map { EventLoop(index: $0, context: context) }
        for fallback in ProxyQueue.takeThreadFallbacks() {
            logger.warning(
                "a queue runs on libdispatch's worker pool instead of a thread of its own: the thread count can grow under load",
                metadata: ["cause": "\(fallback)"])
        }
        // Each listening socket is served by an event loop's queue (the first on loop 0, the next on loop 1, ...),
        // not by a queue of its own: no thread of its own, and a connection accepted for that loop is adopted
        // without a hand-over to another thread.
        for (i, a) in config.listen.enumerated() {
            let l = try Listener(
                address: a, loops: loops, queue: loops[i % loops.count].queue, access: context.access,
                descriptors: context.descriptors, logger: logger)
            listeners.append(l)
        }
        if let a = config.admin {
            admin = try AdminServer(config: a, backend: self, logger: logger)
        }
        for l in listeners {
            l.start()
            logger.notice(
                "listening",
                metadata: ["address": "\(l.address.isIPv6 ? "[\(l.address.host)]" : l.address.host):\(l.boundPort)"])
        }
        if let admin, let a = config.admin {
            admin.start()
            logger.notice(
                "admin listener",
                metadata: [
                    "address":
                        "\(admin.address.isIPv6 ? "[\(admin.address.host)]" : admin.address.host):\(admin.boundPort)",
                    "allow": "\(a.allow.map(\.description).joined(separator: ","))",
                ])
        }
        tokens?.startPrefetching(config.credentials)
        logCertificateExpiries(config.credentials)
        reloadQueue.sync {
            updateWatcher()
            updateCertificateWatcher()
        }
    }

    /// The admin listener's port (useful with port 0), nil without `[admin]`.
    public var adminPort: Int? { admin?.boundPort }

    /// The token service for `config`'s credentials, with the saved tokens loaded.
    func makeTokenService(_ config: ProxyConfig) throws(ServerError) -> TokenService {
        let file = FileTokenStore(TokenStateFile(directory: config.stateDir, secret: config.stateKey))
        var store: any TokenStore = file
        if let cluster = config.cluster, let stateKey = config.stateKey {
            guard let keys = ClusterKeys(stateKey: stateKey, prefix: cluster.keyPrefix) else {
                throw ServerError(
                    description: "cannot derive the [cluster] keys from state_key (PBKDF2 failed in libcrypto)",
                    isConfigurationError: true)
            }
            store = ClusterTokenStore(
                file: file, config: cluster, keys: keys,
                fetchTimeoutSeconds: config.upstreamTimeoutSeconds, logger: logger)
        }
        let service = TokenService(
            credentials: config.credentials, tokenStore: store,
            timeoutSeconds: config.upstreamTimeoutSeconds, logger: logger)
        do {
            try service.loadState()
        } catch {
            throw ServerError(description: "cannot load token state: \(error)", isConfigurationError: true)
        }
        return service
    }

    /// The interception server for `config` (nil when `[tls]` is off) and the digest of the CA files it was
    /// made from.
    func makeTLSServer(_ config: ProxyConfig) throws(ServerError) -> (TLSServer?, String?) {
        guard config.tls.enabled, let certPath = config.tls.caCert, let keyPath = config.tls.caKey else {
            return (nil, nil)
        }
        do {
            let ca = try CertificateAuthority.load(certPath: certPath, keyPath: keyPath)
            return (try TLSServer(minter: LeafMinter(ca: ca, logger: logger)), Self.digest(files: [certPath, keyPath]))
        } catch {
            throw ServerError(description: "cannot set up HTTPS interception: \(error)", isConfigurationError: true)
        }
    }

    /// The listener's own TLS for `config` (nil without a certificate source), around `interception` when it
    /// mints. Made again by every reload, so a renewed certificate file is picked up.
    func makeProxyTLS(_ config: ProxyConfig, interception: TLSServer?) throws(ServerError) -> ProxyTLSServer? {
        do {
            return try ProxyTLSServer.make(config, interception: interception)
        } catch {
            throw ServerError(
                description: "cannot set up TLS on the proxy listener ([proxy] tls_cert, tls_key): \(error)",
                isConfigurationError: true)
        }
    }

    /// SHA-256 over the contents of `files` (a missing file counts as empty): never logged, only compared.
    static func digest(files: [String]) -> String {
        Crypto.sha256Hex(files.map { "\($0)\u{0}\(readTextFile($0) ?? "")" }.joined(separator: "\u{0}"))
    }

    static func kerberosSettings(_ config: ProxyConfig) -> KerberosSettings? {
        // The config loader allows one principal only.
        config.credentials.lazy.compactMap { c -> KerberosSettings? in
            c.kind as? KerberosSettings
        }.first
    }

    /// `upstream_pac`: the first read happens before the listeners open, waiting up to `upstream_timeout_seconds`
    /// (at most 15 s) for it, so the first requests are routed by the PAC file instead of refused. A read that
    /// fails or takes longer does not stop the start: the resolver keeps trying, and until a PAC file loads
    /// requests that need a route get a 502 naming it and `/readyz` is not ready.
    func startPac(_ config: ProxyConfig, shared: SharedServerState) {
        let u = config.upstreamProxy
        guard let source = u.pac else { return }
        let first = DispatchSemaphore(value: 0)
        shared.pac.configure(
            source, refreshSeconds: u.pacRefreshSeconds, timeoutSeconds: config.upstreamTimeoutSeconds,
            evaluationSeconds: u.pacTimeoutSeconds, logger: logger
        ) { first.signal() }
        if first.wait(timeout: .now() + .seconds(min(config.upstreamTimeoutSeconds, 15))) == .timedOut {
            logger.warning(
                "the PAC file did not load within the start-up wait: requests that need a route are refused until it does",
                metadata: ["pac": "\(source)"])
        }
    }

    /// Basic to an `http://` parent sends the password in clear on the network to it (the parent usually
    /// offers a stronger scheme too; libcurl takes the strongest).
    func warnParentBasic(_ config: ProxyConfig) {
        let u = config.upstreamProxy
        guard let name = u.credentialName, let c = config.credentials.first(where: { $0.name == name }),
            let pw = c.kind as? PasswordSettings, pw.schemes.contains(.basic)
        else { return }
        for p in u.parents where p.scheme == .http {
            logger.warning(
                "a parent proxy that takes Basic gets the password in clear over http",
                metadata: [
                    "parent": "\(p)", "credential": "\(name)",
                    "hint": "use an https:// parent, or schemes = [\"ntlm\"] / [\"digest\"] if the parent offers them",
                ])
        }
    }

    func warnInsecure(_ credentials: [Credential]) {
        for c in credentials {
            if let t = c.kind as? ServerTrustSettings, t.insecure {
                logger.warning(
                    "TLS verification is OFF for matched hosts (server-trust insecure = true)",
                    metadata: [
                        "credential": "\(c.name)", "match": "\(c.match.map(\.description).joined(separator: ","))",
                    ])
            }
        }
    }

    /// Stops accepting, lets in-flight exchanges finish for up to `grace` seconds, then closes everything and
    /// calls `done` (on a background queue).
    ///
    /// With `min_shutdown_delay_seconds` (`delay`, else the generation in force's), `/readyz` answers 503 at once
    /// but the listeners keep accepting and serving for that long first: a load balancer or a Kubernetes Service
    /// that still sends new connections while it learns of the shutdown gets them served.
    public func shutdown(grace: Int, delay: Int? = nil, done: @escaping @Sendable () -> Void) {
        shutdownBegun.store(true, ordering: .relaxed)
        let delay = delay ?? reloadQueue.sync { current?.config.minShutdownDelaySeconds ?? 0 }
        guard delay > 0 else {
            drain(grace: grace, done: done)
            return
        }
        logger.notice(
            "shutdown: still accepting connections for min_shutdown_delay_seconds", metadata: ["seconds": "\(delay)"])
        DispatchQueue.global().asyncAfter(deadline: .now() + .seconds(delay)) { [self] in
            drain(grace: grace, done: done)
        }
    }

    /// What `POST /quitquitquit` starts: `handler` is given the trigger and begins the same shutdown as SIGTERM.
    public func onShutdownRequest(_ handler: @escaping @Sendable (String) -> Void) {
        shutdownHandler.withLock { $0 = handler }
    }

    /// Stops accepting, then the grace period.
    private func drain(grace: Int, done: @escaping @Sendable () -> Void) {
        stopping.store(true, ordering: .relaxed)
        reloadQueue.async { [self] in
            watcher?.stop()
            watcher = nil
            certificateWatcher?.stop()
            certificateWatcher = nil
        }
        for l in listeners { l.stop() }
        for loop in loops { loop.queue.async { loop.beginShutdown() } }
        let deadline = DispatchTime.now() + .seconds(grace)
        poll(deadline: deadline, done: done)
    }

    private func poll(deadline: DispatchTime, done: @escaping @Sendable () -> Void) {
        let remaining = loops.reduce(0) { n, loop in n + loop.queue.sync { loop.connectionCount } }
        if remaining == 0 || DispatchTime.now() >= deadline {
            if remaining > 0 {
                logger.warning("grace period over, closing connections", metadata: ["open": "\(remaining)"])
            }
            for loop in loops {
                loop.queue.sync {
                    loop.closeAll()
                    loop.multi.tearDown()
                }
            }
            admin?.stop()
            // The spans of the exchanges that just ended go out before the process exits.
            ProxyTracing.flush(timeoutMillis: 5000)
            done()
            return
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(50)) { [self] in
            poll(deadline: deadline, done: done)
        }
    }
}
