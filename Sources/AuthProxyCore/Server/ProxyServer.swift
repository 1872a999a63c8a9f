import CAuthProxyShims
import Dispatch
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The proxy: listeners, event loops, and graceful shutdown.
///
/// Ownership: `start()` runs once on the caller's thread before any other use; after that its stored
/// properties are only read (`shutdown` reads them from the signal queue and hands all work to each loop's
/// own queue), so sharing it across queues is safe.
public final class ProxyServer: @unchecked Sendable {
    let config: ProxyConfig
    let logger: Logger
    private(set) var loops: [EventLoop] = []
    private(set) var listeners: [Listener] = []
    private let acceptQueue = DispatchQueue(label: "authproxy.accept")
    private(set) var tokens: TokenService?
    private var kerberos: KerberosTickets?
    /// The `[admin]` listener, when configured.
    private(set) var admin: AdminServer?
    /// The interception CA's subject and expiry, and the minter (for its count), when interception is on.
    private(set) var interception: (subject: String, expires: Int64?, minter: LeafMinter)?
    /// Set by ``shutdown(grace:done:)``: `/readyz` answers 503 from then on.
    let stopping = Atomic<Bool>(false)

    public init(config: ProxyConfig, logger: Logger) {
        self.config = config
        self.logger = logger
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
        // Metrics are collected only when something can read them (see ``ProxyMetrics``).
        if config.admin != nil { ProxyMetrics.enable() }
        var own: Set<String> = []
        for a in config.listen {
            let host = a.isIPv6 ? "[\(a.host)]" : a.host
            own.insert("\(host):\(a.port)")
            if a.host == "127.0.0.1" { own.insert("localhost:\(a.port)") }
        }
        var tokens: TokenService? = nil
        if !config.credentials.isEmpty {
            let service = TokenService(credentials: config.credentials, stateDir: config.stateDir, stateKey: config.stateKey,
                timeoutSeconds: config.upstreamTimeoutSeconds, logger: logger)
            do {
                try service.loadState()
            } catch {
                throw ServerError(description: "cannot load token state: \(error)", isConfigurationError: true)
            }
            tokens = service
        }
        self.tokens = tokens
        var tlsServer: TLSServer? = nil
        if config.tls.enabled, let certPath = config.tls.caCert, let keyPath = config.tls.caKey {
            do {
                let ca = try CertificateAuthority.load(certPath: certPath, keyPath: keyPath)
                let minter = try LeafMinter(ca: ca, logger: logger)
                tlsServer = try TLSServer(minter: minter)
                interception = (ca.subject, ca.notAfterMillis, minter)
            } catch {
                throw ServerError(description: "cannot set up HTTPS interception: \(error)")
            }
            logger.notice("HTTPS interception on for matched hosts", metadata: ["ca": "\(certPath)"])
        }
        let kerberos = config.credentials.compactMap { c -> KerberosSettings? in
            if case .kerberos(let k) = c.kind { return k }
            return nil
        }
        if let first = kerberos.first {  // the config loader allows one principal only
            let tickets = KerberosTickets(settings: first, stateDir: config.stateDir, logger: logger)
            try tickets.start()
            self.kerberos = tickets
        }
        for c in config.credentials {
            if case .serverTrust(let t) = c.kind, t.insecure {
                logger.warning("TLS verification is OFF for matched hosts (server-trust insecure = true)",
                    metadata: ["credential": "\(c.name)", "match": "\(c.match.map(\.description).joined(separator: ","))"])
            }
        }
        DescriptorExhaustion.prepare(maxConnections: config.maxConnections, logger: logger)
        let access = AccessControl(config: config)
        let descriptors = DescriptorExhaustion()
        let context = ServerContext(
            config: config, logger: logger, access: access, ownAuthorities: own,
            tokens: tokens, tlsServer: tlsServer, notices: OnceSet(), descriptors: descriptors)
        loops = (0..<config.workers).map { EventLoop(index: $0, context: context) }
        for a in config.listen {
            let l = try Listener(address: a, loops: loops, queue: acceptQueue, access: access, descriptors: descriptors,
                logger: logger)
            listeners.append(l)
        }
        if let a = config.admin {
            let server = try AdminServer(config: a, backend: self, logger: logger)
            admin = server
        }
        for l in listeners {
            l.start()
            logger.notice("listening", metadata: ["address": "\(l.address.isIPv6 ? "[\(l.address.host)]" : l.address.host):\(l.boundPort)"])
        }
        if let admin {
            admin.start()
            logger.notice("admin listener", metadata: [
                "address": "\(admin.address.isIPv6 ? "[\(admin.address.host)]" : admin.address.host):\(admin.boundPort)",
                "allow": "\(config.admin!.allow.map(\.description).joined(separator: ","))"])
        }
        tokens?.startPrefetching(config.credentials.filter(\.prefetch))
    }

    /// The admin listener's port (useful with port 0), nil without `[admin]`.
    public var adminPort: Int? { admin?.boundPort }

    /// Stops accepting, lets in-flight exchanges finish for up to `grace` seconds, then closes everything and
    /// calls `done` (on a background queue).
    public func shutdown(grace: Int, done: @escaping @Sendable () -> Void) {
        stopping.store(true, ordering: .relaxed)
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
            done()
            return
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(50)) { [self] in poll(deadline: deadline, done: done) }
    }
}
