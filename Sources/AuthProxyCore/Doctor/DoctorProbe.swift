import CCurl

/// `authproxy doctor URL`: probes a service the way the ArcGIS SDK's challenge handling meets it, and says
/// what to configure. This is the I/O half; what the answers mean is decided by the pure types beside it
/// (``CredentialAdvisor``, ``DoctorSummary``, ``CredentialTOMLRenderer``).
///
/// The probes, none of which sends a credential:
/// 1. for https, a TLS handshake with OpenSSL (``TLSProbe``): certificate, verification against the system
///    CAs and the `--config` trust, client-certificate requests;
/// 2. `GET` of the URL itself with libcurl, through the same trust settings (and client certificate) the
///    proxy would use: status, `WWW-Authenticate` challenges, ArcGIS error bodies. When the certificate does
///    not verify, the answer is read without verification to see what else is needed;
/// 3. `<root>/rest/info?f=json` (or `/sharing/rest/info`), and for a federated server its portal's.
public struct DoctorProbe {
    public var url: String
    public var timeoutSeconds: Int
    /// From `--config` (empty without it): trust settings and what is configured already.
    public var credentials: [Credential]
    /// From `--config`: the parent proxies the probes go through, as the proxy's own requests do.
    public var upstreamProxy = UpstreamProxyConfig()

    /// Bytes of a body read at most (enough for any ArcGIS error or `rest/info`).
    static let bodyLimit = 256 * 1024

    public init(url: String, timeoutSeconds: Int, credentials: [Credential] = []) {
        self.url = url
        self.timeoutSeconds = timeoutSeconds
        self.credentials = credentials
    }

    /// What `authproxy doctor` prints: the summary (stderr) and the `[[credential]]` TOML (stdout).
    public struct Report: Sendable {
        public var summary: String
        public var toml: String
        /// How many active (not commented-out) credential blocks the TOML holds.
        public var credentialCount: Int
    }

    /// Runs the probes. Throws only when the service cannot be reached (or the URL is not one).
    public func run() throws(DoctorError) -> Report {
        guard let parsed = HTTPURL.parse(url), parsed.target.scheme == "http" || parsed.target.scheme == "https" else {
            throw DoctorError(.badURL, "bad URL: '\(TokenFetcher.redacted(url))' is not an absolute http(s) URL")
        }
        let target = parsed.target
        var f = DoctorFindings(target: target)
        let store = CredentialStore(credentials)
        let applicable = store.applicable(for: target)
        f.configured = applicable.map { ($0.name, $0.kind.typeName) }
        f.takenNames = Set(credentials.map(\.name))
        var trust: (name: String, settings: ServerTrustSettings)? = nil
        for c in applicable {
            if let s = c.kind as? ServerTrustSettings { trust = (c.name, s) }
        }

        let routing = ParentRouting.standalone(upstreamProxy, credentials: credentials)
        let route = routing.flatMap { (try? $0.routeWaiting(url: target.url).get()) ?? nil }
        f.parents = route?.candidates.map(\.url)
        if target.scheme == "https", route == nil {
            f.tls = try TLSProbe(
                host: target.host, port: target.port, timeoutSeconds: timeoutSeconds,
                pathAndQuery: target.pathAndQuery, trust: trust
            ).run()
        }

        // What the proxy would use on the TLS layer; passwords and Kerberos stay out (the challenges are the point).
        var network = NetworkAuth()
        network.trust = trust?.settings
        network.certificate = store.network(for: target).certificate
        let unverified = f.tls.map { !$0.verifies } ?? false
        if unverified { network.trust = ServerTrustSettings(caFile: nil, pinnedPublicKey: nil, insecure: true) }

        let fetch = SyncFetch(timeoutSeconds: timeoutSeconds, routing: routing)
        switch fetch.get(target.url, network: network, bodyLimit: Self.bodyLimit) {
        case .success(let r):
            f.response = Self.response(r, unverified: unverified)
        case .failure(let e):
            if let refusal = f.tls?.clientCertificate?.refusal {
                f.requestFailure = "the server refuses the request without a client certificate (\(refusal))"
            } else {
                throw Self.unreachable(e, destination: "\(target.urlHost):\(target.port)")
            }
        }

        let sameOrigin = { (u: URLTarget) in u.scheme == target.scheme && u.host == target.host && u.port == target.port
        }
        let infoNetwork = { (u: URLTarget) -> NetworkAuth in
            if sameOrigin(u) { return network }
            var n = NetworkAuth()
            n.trust = store.network(for: u).trust
            return n
        }
        let infoURL = f.isPortal ? ServerRoot.sharingRest(f.root) + "/info?f=json" : f.root + "/rest/info?f=json"
        f.restInfo = info(infoURL, fetch: fetch, network: network)
        if f.restInfo?.failure != nil, f.requestFailure != nil {
            // The same refusal as the URL's: say it once, in plain words.
            f.restInfo?.failure = "refused like the URL (no client certificate)"
        }
        let path = String(target.path).lowercased()
        if f.restInfo?.info == nil, !f.isPortal, !path.contains("/rest/"), !path.hasSuffix("/rest") {
            // Neither /rest/ nor /sharing/ in the URL: the root may be a portal's (https://host/portal/home).
            let portal = info(ServerRoot.sharingRest(f.root) + "/info?f=json", fetch: fetch, network: network)
            if portal.info != nil {
                f.restInfo = portal
                f.isPortal = true
            }
        }
        if !f.isPortal, let owner = f.restInfo?.info?.owningSystemURL, let o = HTTPURL.parse(owner) {
            let portalInfoURL = ServerRoot.sharingRest(o.withoutTrailingSlash) + "/info?f=json"
            f.portalInfo = info(portalInfoURL, fetch: fetch, network: infoNetwork(o.target))
        }

        let advice = CredentialAdvisor.advise(f)
        var header = ["authproxy doctor \(f.displayURL)"]
        if advice.suggestions.isEmpty {
            header.append("No credential to add: see the summary on stderr.")
        } else {
            header += [
                "Fill in every \(CredentialSuggestion.placeholder). Secrets are read from the environment (\"${NAME}\": set NAME",
                "for `authproxy check` and `serve`), or write \"file:/path/to/secret\" instead.",
            ]
        }
        return Report(
            summary: DoctorSummary.render(f, advice),
            toml: CredentialTOMLRenderer.render(advice.suggestions, header: header),
            credentialCount: advice.suggestions.filter { !$0.isAlternative }.count)
    }

    private func info(_ url: String, fetch: SyncFetch, network: NetworkAuth) -> DoctorFindings.InfoProbe {
        let shown = TokenFetcher.redacted(url)
        switch fetch.get(url, network: network, bodyLimit: Self.bodyLimit) {
        case .success(let r):
            return DoctorFindings.InfoProbe(url: shown, status: r.status, reading: RestInfo.read(r.body))
        case .failure(let e):
            return DoctorFindings.InfoProbe(url: shown, failure: e.message)
        }
    }

    static func response(_ r: HTTPFetch.Response, unverified: Bool) -> DoctorFindings.Response {
        let fields = { (name: String) in r.headers.filter { $0.name.caseInsensitiveEquals(name) }.map(\.value) }
        let encoding = fields("content-encoding").first
        var body = r.body
        if let e = BoundedInflate.Encoding(contentEncoding: encoding) {
            body = BoundedInflate.decode(body, encoding: e, limit: TokenRejection.lookAhead) ?? []
        }
        return DoctorFindings.Response(
            status: r.status, contentType: r.contentType,
            challenges: AuthChallenge.parse(fields: fields("www-authenticate")),
            arcgisError: ArcGISErrorBody.read(status: r.status, contentType: r.contentType, body: body),
            location: fields("location").first.map(TokenFetcher.redacted),
            readWithoutVerification: unverified)
    }

    /// The transport failure of the probe request, by cause.
    static func unreachable(_ e: HTTPFetch.FetchError, destination: String) -> DoctorError {
        switch e.failure {
        case .dns?: return DoctorError(.dns, "cannot resolve host: \(e.message)")
        case .connect?: return DoctorError(.connect, "connection refused or unreachable: \(e.message)")
        case .timeout?: return DoctorError(.timeout, "timeout: \(e.message)")
        case .tlsHandshake?, .untrustedCertificate?, .pinMismatch?:
            return DoctorError(.tls, "TLS failure: \(e.message)")
        default: return DoctorError(.http, "request to \(destination) failed: \(e.message)")
        }
    }
}
