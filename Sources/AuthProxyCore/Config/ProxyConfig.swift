import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// What to do with a destination that no credential matches.
public enum UnmatchedPolicy: String, Sendable, CaseIterable {
    case relay
    case deny
}

/// Which HTTP client carries requests to plain `http://` upstreams without a network credential.
public enum HTTPClientChoice: String, Sendable, CaseIterable {
    /// The proxy's own HTTP/1.1 client (``HTTP1Transfer``).
    case native
    /// libcurl, as for every other upstream.
    case libcurl
}

/// `[proxy] pac_fallback`: what the served PAC file says after `PROXY <address>` for matched hosts.
public enum PacFallback: String, Sendable, CaseIterable {
    /// `PROXY a` alone: when the proxy is down, matched hosts fail rather than go out without their credentials.
    case none
    /// `PROXY a; DIRECT`: when the proxy is down, clients go to matched hosts directly (and meet their logins).
    case direct
}

public enum LogFormat: String, Sendable, CaseIterable {
    case text
    case json
}

/// The validated contents of `proxy.conf`.
public struct ProxyConfig: Sendable {
    public var listen: [ListenAddress] = [ListenAddress(host: "127.0.0.1", port: 3128)]
    public var connectPorts: Set<Int> = [443]
    public var unmatched: UnmatchedPolicy = .relay
    public var stateDir: String = "./state"
    public var upstreamTimeoutSeconds: Int = 60
    public var headerTimeoutSeconds: Int = 30
    public var idleTimeoutSeconds: Int = 60
    public var shutdownGraceSeconds: Int = 10
    /// A CONNECT tunnel in which nothing moved for this long is closed.
    public var tunnelIdleTimeoutSeconds: Int = 600
    /// Event loops (each one serial queue and one libcurl multi handle). The default, ``CPUBudget/defaultWorkers``,
    /// is two per CPU this process may use, at least 4: libdispatch on Linux hands every socket event from its
    /// manager thread to a worker thread, and more queues let those hand-offs overlap or batch (measured: 2 loops
    /// ≈ 18k req/s, 4 loops ≈ 25k on 2 cores; on one saturated core 4 loops needed ~10 % less CPU per request
    /// than 2).
    public var workers: Int = CPUBudget.current.defaultWorkers
    /// Whether `workers` was written in the file.
    public var workersSet = false
    public var maxConnections: Int = 10_000
    /// Connections one client address may hold; nil: a quarter of ``maxConnections``.
    public var maxConnectionsPerClient: Int? = nil
    /// Client addresses whose connections are served; others are closed right after accept.
    public var allowClients: [AddressBlock] = AddressBlock.loopback
    /// Whether `allow_clients` was written in the file (an explicit choice, even if it equals the default).
    public var allowClientsSet = false
    /// Destinations refused (403) after DNS resolution, for relayed requests and tunnels alike.
    public var denyDestinations: [AddressBlock] = AddressBlock.defaultDenied
    /// `[[client]]` entries; when any exists every request needs `Proxy-Authorization`.
    public var clients: [ProxyClient] = []
    /// Web app origins that may use the `/proxy?<url>` endpoint (ArcGIS JS `proxyUrl`); empty: endpoint off.
    public var allowedOrigins: [String] = []
    /// `[[app]]`: web apps on `/proxy`, each with its own credentials and optional sign-in.
    public var apps: [WebApp] = []
    public var logLevel: Logger.Level = .info
    public var logFormat: LogFormat = .text
    public var credentials: [Credential] = []
    /// `[tls]`: the interception CA; nil paths: no interception.
    public var tls = TLSConfig()
    /// `[proxy] tls_cert`, `tls_key`: the certificate (chain) and key (PEM files) the listener shows clients that
    /// open TLS to the proxy itself; nil: minted from the interception CA, if any (``ProxyTLSSource``).
    public var tlsCert: String? = nil
    public var tlsKey: String? = nil
    /// Key material for encrypting the token state file (AES-256-GCM); nil: the file is stored in clear.
    public var stateKey: String? = nil
    /// Largest request body kept for replaying a request after a token rejection (memory, then a temp file).
    public var maxReplayBytes: Int64 = 100 * 1024 * 1024
    /// `[proxy] upstream_retries`: how many more times an idempotent request (`GET`, `HEAD`, `OPTIONS` without a
    /// body) goes to the upstream after a refused or reset connection, or a 502, 503, 504 or 429 answer, before
    /// anything reached the client (``RetryPolicy``); 0 turns retries off.
    public var upstreamRetries = 2
    /// `[proxy] max_retry_wait_seconds`: the longest wait before a retry, and the longest `Retry-After` honoured.
    public var maxRetryWaitSeconds = 5
    /// `[proxy] retry_budget_percent`: retries to one upstream host add at most this share to its requests
    /// (over 10 s, plus a few per event loop; ``RetryBudget``).
    public var retryBudgetPercent = 20
    /// `[proxy] expiry_warning_days`: `check`, the log and the status page warn this many days before an API key,
    /// the refresh token of a sign-in or a client certificate expires (``CredentialExpiry``).
    public var expiryWarningDays = 14
    /// `[proxy] refresh`: the ``RefreshMode`` of every credential that fetches tokens and sets none itself.
    public var refresh: RefreshMode = .ahead
    /// `[proxy] get_as_post_above_bytes`: an ArcGIS REST `GET` whose URL (token included) is longer than this goes
    /// upstream as a `POST` form, as does one the upstream answered 414 (``GetAsPost``); 0 turns both off.
    public var getAsPostAboveBytes = 2048
    /// `[proxy] watch_config`: reload when the configuration file or a `file:` secret it names changes.
    public var watchConfig = false
    /// `[proxy] http_client`: the client for plain `http://` upstreams without a network credential (https and
    /// network authentication always go through libcurl).
    public var httpClient: HTTPClientChoice = .native
    /// `[admin]`: the operations listener (metrics, status page, readiness, reload); nil: off.
    public var admin: AdminConfig? = nil
    /// `[proxy] upstream_proxy` and friends: a parent proxy for upstream connections.
    public var upstreamProxy = UpstreamProxyConfig()
    /// `[proxy] pac_address`: the `host:port` the served PAC file tells clients to use (`PROXY host:port`); nil:
    /// the `Host` the PAC file was fetched with (see ``PacEndpoint``).
    public var pacAddress: String? = nil
    /// `[proxy] pac_hosts`: names besides IP literals, localhost and `pac_address`'s host that the proxy
    /// listener answers `/proxy.pac` for (``PacRequestPolicy``), lowercased.
    public var pacHosts: [String] = []
    /// `[proxy] pac_fallback`.
    public var pacFallback: PacFallback = .none
    /// `[cluster]`: tokens shared by the replicas of a fleet through Redis; nil: this process alone.
    public var cluster: ClusterConfig? = nil
    /// `[[upstream]]`: concurrency caps per upstream host.
    public var upstreamLimits: [UpstreamHostLimit] = []
    /// `min_shutdown_delay_seconds`: after SIGTERM, new connections are still accepted this long before draining.
    public var minShutdownDelaySeconds = 0
    /// `[tracing]` / `OTEL_*`: OpenTelemetry traces (nil: off). See ``TracingConfig``.
    public var tracing: TracingConfig? = nil

    public init() {}

    public var effectiveMaxConnectionsPerClient: Int { maxConnectionsPerClient ?? max(1, maxConnections / 4) }

    /// Why this configuration would be an open relay, or nil: a listener on a non-loopback address with
    /// neither `allow_clients` nor `[[client]]` lets every neighbour on the network spend the credentials and
    /// reach the host's loopback services. `serve` and `check` refuse it.
    public var openRelayProblem: String? {
        let exposed = listen.filter { a in
            guard let ip = IPAddress.parse(a.host) else { return true }
            return !AddressBlock.loopback.contains(ip)
        }
        guard !exposed.isEmpty, !allowClientsSet, clients.isEmpty else { return nil }
        return "listening on \(exposed.map(\.description).joined(separator: ", ")), which is not a loopback address, "
            + "with neither [proxy] allow_clients nor any [[client]] configured: every host that can reach it could use "
            + "every credential (an open relay). Set [proxy] allow_clients to the networks that may use the proxy "
            + "(e.g. allow_clients = [\"10.42.0.0/16\"]), and/or add [[client]] entries (name, password) so clients "
            + "must send Proxy-Authorization."
    }
}

/// `[admin]` section: where the admin listener listens and who may use it.
public struct AdminConfig: Sendable, Equatable {
    public var listen: ListenAddress
    /// Client addresses served; others are closed right after accept. Default: loopback only.
    public var allow: [AddressBlock] = AddressBlock.loopback
    /// Host names (lowercase, no port) that requests may be addressed to besides IP literals and `localhost`:
    /// a guard against DNS rebinding from web pages (``AdminRequestPolicy``). Default: none.
    public var hosts: [String] = []
    /// `POST /capture` records redacted HAR captures (``CaptureRecorder``). Default: off.
    public var capture = false
    /// `quitquitquit`: `POST /quitquitquit` starts the same shutdown as SIGTERM. Off by default.
    public var quitquitquit = false

    public init(listen: ListenAddress, allow: [AddressBlock] = AddressBlock.loopback, hosts: [String] = []) {
        self.listen = listen
        self.allow = allow
        self.hosts = hosts
    }
}

/// `[tls]` section.
public struct TLSConfig: Sendable, Equatable {
    public enum Intercept: String, Sendable, CaseIterable {
        /// Intercept CONNECT to hosts some credential matches.
        case matched
        /// Never intercept: every CONNECT is a blind tunnel.
        case none
    }

    public var caCert: String? = nil
    public var caKey: String? = nil
    public var intercept: Intercept = .matched
    /// `[tls] no_intercept`: hosts whose CONNECT tunnels stay blind even when a credential matches them (Windows
    /// logins bound to the server certificate, IIS Extended Protection, cannot pass through interception).
    public var noIntercept: [HostPattern] = []

    public var enabled: Bool { caCert != nil && caKey != nil && intercept == .matched }
}
