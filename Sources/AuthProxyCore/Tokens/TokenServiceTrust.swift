/// Whether a password may go to a token service that a server's `rest/info` named (`authInfo.tokenServicesUrl`,
/// or the portal of `owningSystemUrl`), on that server's word alone.
///
/// `rest/info` is an answer of the upstream, not configuration: trusting the URL it names by host alone let a
/// server root on one port send the password to whatever listens on another port of that host (any local user
/// can open one). The rule is therefore the browser's: the token service must be on the server root's own
/// **origin** — scheme, host and port, with the scheme's default port filled in — or on an origin the
/// credential is configured for (one of its `match` prefixes, whose roots already get the password directly),
/// and never over http for an https server. The one other origin taken on the server's word is its https form
/// (`http://host` on 80 naming `https://host` on 443). Anything else needs `token_url`.
enum TokenServiceTrust {
    /// `scheme://host:port`, lower-cased, default port explicit: two URLs are on one origin when these are equal.
    struct Origin: Hashable, Sendable, CustomStringConvertible {
        var scheme: String
        var host: String
        var port: Int

        init(scheme: String, host: String, port: Int) {
            self.scheme = scheme.lowercased()
            self.host = host.lowercased()
            self.port = port
        }

        /// The origin of an absolute http(s) URL; nil for anything else.
        init?(url: String) {
            guard let t = HTTPURL.parse(url)?.target else { return nil }
            self.init(scheme: t.scheme, host: t.host, port: t.port)
        }

        /// The origin of a credential's `match` prefix; nil for a wildcard, which names no single origin.
        init?(match m: MatchPrefix) {
            guard !m.wildcard else { return nil }
            self.init(scheme: m.scheme, host: m.host, port: m.effectivePort)
        }

        var description: String {
            let h = host.utf8.contains(UInt8(ascii: ":")) ? "[\(host)]" : host
            return "\(scheme)://\(h):\(port)"
        }
    }

    /// Why a named token service is not trusted: the text completes "… names the token service X, which …".
    struct Distrust: Error, Equatable, Sendable {
        var reason: String
    }

    /// Whether the password may go to `tokenService`, named by the `rest/info` of the server at `root`;
    /// `configured`: the origins the credential is configured for.
    static func check(tokenService: String, root: String, configured: Set<Origin>) -> Result<Void, Distrust> {
        guard let service = Origin(url: tokenService) else {
            return .failure(Distrust(reason: "is not an http(s) URL"))
        }
        guard let own = Origin(url: root) else {
            return .failure(Distrust(reason: "cannot be compared with the server root's origin"))
        }
        if own.scheme == "https" && service.scheme != "https" {
            return .failure(Distrust(reason: "is plain http while the server is https"))
        }
        if service == own || configured.contains(service) { return .success(()) }
        // A server reached over http on port 80 whose token service is its https form on 443 (ArcGIS names the
        // https URL for a site that also answers http): the same host's default ports, with more protection, not
        // another listener on that host.
        if own.scheme == "http", own.port == 80, service == Origin(scheme: "https", host: own.host, port: 443) {
            return .success(())
        }
        return .failure(
            Distrust(
                reason:
                    "is on another origin (\(service)) than the server root (\(own)), and on none of the credential's match prefixes"
            ))
    }

    /// The origins credential `c` is configured for: its non-wildcard `match` prefixes, and their https forms
    /// when it upgrades http to https (the requests, and so the roots, really go there).
    static func configuredOrigins(_ c: Credential) -> Set<Origin> {
        var origins = Set<Origin>()
        for m in c.match {
            guard let o = Origin(match: m) else { continue }
            origins.insert(o)
            if c.upgradeToHTTPS, o.scheme == "http" {
                origins.insert(Origin(scheme: "https", host: o.host, port: o.port == 80 ? 443 : o.port))
            }
        }
        return origins
    }
}
