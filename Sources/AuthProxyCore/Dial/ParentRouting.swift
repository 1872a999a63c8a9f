import Foundation

/// One configuration generation's parent proxies as the executor uses them: which parents a destination goes
/// through (``UpstreamProxyConfig``, `no_proxy`, or the PAC file of `upstream_pac`), the credential they are
/// authenticated with, and the process-wide ``ParentHealth`` that orders them. Immutable; shared by the event
/// loops and the token service.
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
    /// The PAC file's answers, with `upstream_pac` (nil: the configured list, or none).
    let pac: PacResolver?
    /// `deny_destinations`: a parent the PAC file names is checked against it when connected to
    /// (``ParentRoute/parentDeny``; an operator chose the configured ones; a PAC file, possibly spoofed, could name
    /// the metadata service).
    let deny: [AddressBlock]

    init(
        config: UpstreamProxyConfig, credentials: [Credential], health: ParentHealth, via: String = "1.1 authproxy",
        pac: PacResolver? = nil, deny: [AddressBlock] = []
    ) {
        self.config = config
        self.deny = deny
        self.via = via
        self.health = health
        self.pac = config.pac == nil ? nil : pac
        credentialName = config.credentialName
        let c = config.credentialName.flatMap { n in credentials.first { $0.name == n } }
        password = c?.kind as? PasswordSettings
        kerberos = c?.kind as? KerberosSettings
        // libcurl sends Basic with the request too (its `basicOnly` case), so the own client can take a Basic-only
        // login: nothing is negotiated. Never logged; kept with the generation it came from.
        if let pw = password, pw.schemes == [.basic], kerberos == nil {
            basicAuthorization = pw.basicAuthorization(overHTTPS: true)
        } else {
            basicAuthorization = nil
        }
    }

    /// `Proxy-Authorization` for a parent whose credential is a Basic-only password (nil: none, or one that needs
    /// a handshake libcurl carries out).
    let basicAuthorization: String?

    /// Whether the own HTTP/1.1 client can carry a plain `http://` request to `parent` in absolute form: an `http`
    /// or `https` parent (over TLS verified with ``parentTrust``) with no login, or a Basic-only one sent with the
    /// request. Any other login (Digest, NTLM, Negotiate, answered from the parent's 407) is libcurl's; a SOCKS
    /// parent tunnels instead.
    func ownClientForwards(through parent: ParentProxy) -> Bool {
        guard parent.scheme == .http || parent.scheme == .https else { return false }
        guard config.mayAuthenticate(parent), password != nil || kerberos != nil else { return true }
        return basicAuthorization != nil
    }

    /// How an `https` parent's certificate is verified: `upstream_proxy_ca` added to the system's CAs, as libcurl
    /// does for a parent (`CURLOPT_PROXY_CAINFO` with the default CA path).
    var parentTrust: ServerTrustSettings {
        ServerTrustSettings(caFile: config.caFile, pinnedPublicKey: nil, insecure: false)
    }

    /// The `Proxy-Authorization` the own client sends `parent` with a request in absolute form (nil: none).
    func proxyAuthorization(for parent: ParentProxy) -> String? {
        config.mayAuthenticate(parent) ? basicAuthorization : nil
    }

    /// For a command-line tool (`doctor`, `login`, `signout`): the configured parents with a health record of
    /// their own; nil when none is configured.
    static func standalone(_ config: UpstreamProxyConfig, credentials: [Credential]) -> ParentRouting? {
        guard config.isConfigured else { return nil }
        return ParentRouting(
            config: config, credentials: credentials, health: ParentHealth(backoffSeconds: config.backoffSeconds))
    }

    /// The route to a destination, as far as it is known without evaluating a PAC file.
    enum Lookup: Equatable {
        /// nil: direct.
        case ready(ParentRoute?)
        /// The PAC file has not been asked about this destination lately: ``evaluate(scheme:host:port:then:)``,
        /// then look up again.
        case pending
        /// No route can be given: no PAC file has loaded yet, or it failed for this destination.
        case refused(ErrorResponse)
    }

    /// The route to `host:port` for a request of `scheme` (`http`, `https`; a CONNECT counts as `https`).
    /// `no_proxy` is authproxy's own decision and comes first, before any PAC file.
    func lookup(scheme: String, host: String, port: Int) -> Lookup {
        if config.noProxy.bypasses(host: host, port: port) { return .ready(nil) }
        guard let pac else {
            return .ready(config.parents.isEmpty ? nil : ParentRoute(candidates: config.parents, routing: self))
        }
        let source = config.pac?.description ?? ""
        switch pac.lookup(Self.key(scheme: scheme, host: host, port: port)) {
        case .miss:
            return .pending
        case .answer(.directive(let d)):
            let r = d.route
            if r.parents.isEmpty { return .ready(nil) }
            // Its parents' addresses, literal or resolved, are checked against deny_destinations where they are
            // connected to (``ConnectAttempts``): one denied is skipped, and when none is left the answer names it.
            return .ready(
                ParentRoute(candidates: r.parents, routing: self, fallbackDirect: r.fallbackDirect, fromPac: true))
        case .answer(.failed(let message)):
            return .refused(
                ErrorResponse(
                    status: 502, message: "The PAC file \(source) gave no route to \(host):\(port)",
                    details: [message]))
        case .notLoaded(let status):
            var details = [
                "authproxy refuses requests rather than guess a route while no PAC file is in force "
                    + "([proxy] upstream_pac); it reads the file again every few seconds."
            ]
            if let e = status.lastError { details.insert(e, at: 0) }
            return .refused(
                ErrorResponse(
                    status: 502, message: "No PAC file loaded from \(source)", details: details,
                    retryAfter: 10))
        }
    }

    /// Asks the PAC file about the destination off the caller's queue; `then` runs on the PAC engine's queue.
    func evaluate(scheme: String, host: String, port: Int, then: @escaping @Sendable () -> Void) {
        guard let pac else {
            then()
            return
        }
        pac.evaluate(Self.key(scheme: scheme, host: host, port: port), then: then)
    }

    /// The route of `url` (an http(s) URL), evaluating the PAC file and waiting for it if needed: for the token
    /// service's queue, which may block, never an event loop. An unparsable URL goes direct (its request fails
    /// on its own).
    func routeWaiting(url: String) -> Result<ParentRoute?, ErrorResponse> {
        guard let u = HTTPURL.parse(url) else { return .success(nil) }
        let t = u.target
        var lookup = lookup(scheme: t.scheme, host: t.host, port: t.port)
        if lookup == .pending, let pac {
            pac.evaluateNow(Self.key(scheme: t.scheme, host: t.host, port: t.port))
            lookup = self.lookup(scheme: t.scheme, host: t.host, port: t.port)
        }
        switch lookup {
        case .ready(let r): return .success(r)
        case .refused(let e): return .failure(e)
        case .pending:
            return .failure(ErrorResponse(status: 502, message: "The PAC file gave no route to \(t.host):\(t.port)"))
        }
    }

    /// Host names as the PAC file sees them: lower-cased, without a trailing dot.
    private static func key(scheme: String, host: String, port: Int) -> PacRouteCache.Key {
        var h = host.lowercased()
        if h.count > 1, h.hasSuffix(".") { h.removeLast() }
        return PacRouteCache.Key(scheme: scheme, host: h, port: port)
    }
}

/// The parents one request may go through, in configured order (``ParentHealth/order(_:)`` puts those in
/// backoff last when the request starts).
struct ParentRoute: Equatable {
    let candidates: [ParentProxy]
    let routing: ParentRouting
    /// When every candidate failed in a way that moves on to the next one (``ParentFailover/backsOff(_:)``), the
    /// destination is reached directly (a PAC file's `PROXY a; PROXY b; DIRECT`), with `deny_destinations`
    /// checked as for any direct connection.
    var fallbackDirect = false
    /// Named by a PAC file: its parents' addresses are checked against `deny_destinations` when connected to (by
    /// the ``Connector``'s ``Dialer``, or libcurl's open-socket callback for a ``CurlTransfer``).
    var fromPac = false

    /// The `deny_destinations` that apply to connections to the parents: none for configured ones (an operator
    /// chose them), the list for a PAC file's.
    var parentDeny: [AddressBlock] { fromPac ? routing.deny : [] }
}
