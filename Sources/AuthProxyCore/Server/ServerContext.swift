import Logging

/// One generation of the configuration and everything built from it, as the event loops read it: immutable
/// once made. A reload builds the next generation and installs it on each loop (``EventLoop/install(_:)``);
/// every exchange holds the generation it began with until it ends (``ExchangeContext/context``), so a request,
/// a CONNECT tunnel or an intercepted connection's current request finishes with the settings it started with.
///
/// What must survive a reload is not rebuilt: the ``SharedServerState`` (connection and rate limiters, logged-once
/// keys, descriptor exhaustion), the ``TokenService`` (which keeps the tokens of unchanged credentials), and the
/// ``TLSServer`` when the interception CA did not change (its minted leaves).
final class ServerContext: Sendable {
    /// 1 at start, +1 per applied reload.
    let generation: Int
    let config: ProxyConfig
    let logger: Logger
    /// Client allow-list, proxy authentication, scopes, rate and connection limits, denied destinations.
    let access: AccessControl
    /// `host:port` strings under which clients reach the proxy itself.
    let ownAuthorities: Set<String>
    /// nil when no token-type credential has been configured since the start.
    let tokens: TokenService?
    /// nil when interception is off (no `[tls]` CA).
    let tlsServer: TLSServer?
    /// The listener's own TLS, for clients whose proxy URL is `https://`; nil: no certificate source.
    let proxyTLS: ProxyTLSServer?
    /// The process-wide live state, the same object in every generation.
    let shared: SharedServerState
    /// `Via` as this process writes it: `1.1 authproxy`, or with a parent proxy configured a name of its own per
    /// process, so that a request that comes back to it (a parent or PAC pointing at the proxy itself) is
    /// recognised (508) while a chain of two authproxy instances (a sidecar whose parent is a central one) is not
    /// taken for a loop.
    let viaValue: String
    /// The parent proxies (nil: none configured).
    let routing: ParentRouting?
    /// What `/proxy.pac` is made from in this generation (its rules are built once, not per fetch).
    let pac: PacEndpoint.Settings
    /// `upstream_retries` and `max_retry_wait_seconds`, as the decision the executor asks.
    let retryPolicy: RetryPolicy

    init(
        generation: Int, config: ProxyConfig, logger: Logger, ownAuthorities: Set<String>, tokens: TokenService?,
        tlsServer: TLSServer?, proxyTLS: ProxyTLSServer? = nil, shared: SharedServerState
    ) {
        self.proxyTLS = proxyTLS
        self.generation = generation
        self.config = config
        self.logger = logger
        self.access = AccessControl(config: config, shared: shared)
        self.ownAuthorities = ownAuthorities
        self.tokens = tokens
        self.tlsServer = tlsServer
        self.shared = shared
        viaValue = config.upstreamProxy.isConfigured ? shared.viaValue : "1.1 authproxy"
        routing =
            config.upstreamProxy.isConfigured
            ? ParentRouting(
                config: config.upstreamProxy, credentials: config.credentials, health: shared.parents,
                via: shared.viaValue, pac: shared.pac, deny: config.denyDestinations) : nil
        shared.parents.setBackoff(seconds: config.upstreamProxy.backoffSeconds)
        self.pac = PacEndpoint.Settings(config)
        retryPolicy = RetryPolicy(config)
    }

    /// Hosts already reported as "matched but not interceptable" (logged once each).
    var notices: OnceSet { shared.notices }
    /// Running out of file descriptors: counted, logged (rate-limited), and the listeners' pause.
    var descriptors: DescriptorExhaustion { shared.descriptors }

    /// The name of the `kerberos` credential (at most one per process), for metrics.
    var kerberosCredentialName: String? {
        config.credentials.first { $0.kind is KerberosSettings }?.name
    }
}
