/// One configuration generation's parent proxies as the executor uses them: which parents a destination goes
/// through (``UpstreamProxyConfig``, `no_proxy`), the credential they are authenticated with, and the
/// process-wide ``ParentHealth`` that orders them. Immutable; shared by the event loops and the token service.
final class ParentRouting: Sendable, Equatable {
    static func == (a: ParentRouting, b: ParentRouting) -> Bool { a === b }

    let config: UpstreamProxyConfig
    /// The credential of `upstream_proxy_credential` (nil: none configured).
    let credentialName: String?
    let password: PasswordSettings?
    let kerberos: KerberosSettings?
    let health: ParentHealth
    /// This process's `Via` value, sent on CONNECT requests to the parents.
    let via: String

    init(config: UpstreamProxyConfig, credentials: [Credential], health: ParentHealth, via: String = "1.1 authproxy") {
        self.config = config
        self.via = via
        self.health = health
        credentialName = config.credentialName
        let c = config.credentialName.flatMap { n in credentials.first { $0.name == n } }
        if case .password(let p)? = c?.kind { password = p } else { password = nil }
        if case .kerberos(let k)? = c?.kind { kerberos = k } else { kerberos = nil }
    }

    /// For a command-line tool (`doctor`, `login`, `signout`): the configured parents with a health record of
    /// their own; nil when none is configured.
    static func standalone(_ config: UpstreamProxyConfig, credentials: [Credential]) -> ParentRouting? {
        guard config.isConfigured else { return nil }
        return ParentRouting(config: config, credentials: credentials, health: ParentHealth(backoffSeconds: config.backoffSeconds))
    }

    /// The route to `host:port`: nil for direct.
    func route(host: String, port: Int) -> ParentRoute? {
        let parents = config.parents(host: host, port: port)
        return parents.isEmpty ? nil : ParentRoute(candidates: parents, routing: self)
    }

    /// The parents of `url` (an http(s) URL), nil for direct or an unparsable URL.
    func route(url: String) -> ParentRoute? {
        guard let u = HTTPURL.parse(url) else { return nil }
        return route(host: u.target.host, port: u.target.port)
    }
}

/// The parents one request may go through, in configured order (``ParentHealth/order(_:)`` puts those in
/// backoff last when the request starts).
struct ParentRoute: Equatable {
    let candidates: [ParentProxy]
    let routing: ParentRouting
}
