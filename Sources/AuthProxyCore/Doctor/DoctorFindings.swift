/// What the probes of `authproxy doctor` found about one URL, as plain values: the input of
/// ``CredentialAdvisor`` (what to configure) and ``DoctorSummary`` (what to tell the operator). Made by
/// ``DoctorProbe``; unit tests build them by hand.
struct DoctorFindings: Sendable {
    /// The URL as given (its query is never printed: it may hold a token).
    var target: URLTarget
    /// The ArcGIS root the URL belongs to (``ServerRoot``): `https://host/arcgis`, `https://host/portal`, or the
    /// origin / first path segment of any other URL.
    var root: String
    var isPortal: Bool
    /// nil for http URLs (and for https ones reached through a parent proxy).
    var tls: TLS?
    /// The parent proxies the probes went through (`[proxy] upstream_proxy` of `--config`); nil: direct.
    var parents: [String]? = nil
    /// `<root>/rest/info` (or `/sharing/rest/info`).
    var restInfo: InfoProbe?
    /// The `/sharing/rest/info` of the portal a server is federated with.
    var portalInfo: InfoProbe?
    /// The answer to the URL itself; nil when no answer could be had (``requestFailure`` says why).
    var response: Response?
    var requestFailure: String?
    /// Credentials of `--config` that apply to the URL (name and type), by the proxy's own matching rule.
    var configured: [(name: String, type: String)] = []

    init(target: URLTarget) {
        self.target = target
        let r = ServerRoot.of(target)
        root = r.root
        isPortal = r.isPortal
    }

    /// `scheme://host[:port]`: what TLS settings (server trust, client certificates) are matched on.
    var origin: String {
        target.isDefaultPort
            ? "\(target.scheme)://\(target.urlHost)" : "\(target.scheme)://\(target.urlHost):\(target.port)"
    }

    /// The prefix web-tier credentials (password, Kerberos) should match: the ArcGIS root when the URL has
    /// one (`…/arcgis/rest/…` → `…/arcgis`); for any other URL its first path segment when the URL goes
    /// deeper than that (`/wms/service` → `/wms`), else the origin (`/data` is the resource itself).
    var authScope: String {
        let lower = target.path.lowercased()
        if ["/rest/", "/sharing/", "/tokens/"].contains(where: { lower.contains($0) }) || lower.hasSuffix("/rest")
            || lower.hasSuffix("/sharing") || restInfo?.info != nil
        {
            return root
        }
        let segments = target.path.split(separator: "/", omittingEmptySubsequences: true)
        return segments.count >= 2 ? origin + "/" + segments[0] : origin
    }

    /// What the names of proposed TLS credentials (and their secret variables) are made from: host, and port
    /// unless it is the scheme's default (TLS is per host and port).
    var originPlace: String { Self.withoutScheme(origin) }

    /// What the names of the other proposed credentials are made from: ``originPlace`` and the first path
    /// segment of ``authScope`` (the ArcGIS web adaptor, e.g. `server` or `portal`; the default `arcgis` is
    /// left out), so two services behind one host name get different names and secret variables.
    var scopePlace: String {
        let place = Self.withoutScheme(authScope)
        return place.lowercased().hasSuffix("/arcgis") ? String(place.dropLast("/arcgis".count)) : place
    }

    private static func withoutScheme(_ url: String) -> String {
        guard let r = url.range(of: "://") else { return url }
        return String(url[r.upperBound...])
    }

    /// Names of every credential in `--config` (proposed names must not repeat them).
    var takenNames: Set<String> = []

    /// The URL without its query string, for messages.
    var displayURL: String { origin + target.path }

    func isConfigured(_ type: String) -> Bool { configured.contains { $0.type == type } }

    /// The TLS handshake, made without a client certificate.
    struct TLS: Sendable, Equatable {
        /// `TLSv1.3`.
        var version: String
        var subject: String
        var issuer: String
        /// `notAfter` as OpenSSL prints it.
        var notAfter: String?
        /// `sha256//<base64>` of the server's public key, as `pinned_public_key` takes it.
        var publicKeyPin: String
        /// Against the system CAs, with the host name.
        var systemTrust: Verification
        /// Through the `server-trust` credential of `--config` that matches, if there is one.
        var configuredTrust: ConfiguredTrust?
        var clientCertificate: ClientCertificateRequest?

        /// What the proxy would conclude: the configured trust if any, else the system CAs.
        var verifies: Bool { configuredTrust?.verification.ok ?? systemTrust.ok }
    }

    struct Verification: Sendable, Equatable {
        var ok: Bool
        /// Why not (OpenSSL's text: "self-signed certificate", "Hostname mismatch").
        var reason: String?

        static let verified = Verification(ok: true, reason: nil)
    }

    struct ConfiguredTrust: Sendable, Equatable {
        var credential: String
        /// `ca_file …`, `pinned_public_key`, `insecure`.
        var setting: String
        var verification: Verification
    }

    /// The server asked for a client certificate (a CertificateRequest, in the handshake or after it).
    struct ClientCertificateRequest: Sendable, Equatable {
        /// The issuers it accepts (the CertificateRequest's CA names), one-line DNs.
        var acceptedIssuers: [String]
        /// false: asked after the handshake (TLS 1.3 post-handshake authentication, or a TLS 1.2 renegotiation).
        var duringHandshake: Bool
        /// Without a certificate the connection was refused: the alert or error, e.g. "tlsv13 alert
        /// certificate required". nil: the server answered anyway (the certificate is optional).
        var refusal: String?
    }

    struct InfoProbe: Sendable, Equatable {
        /// Without a query string.
        var url: String
        var status: Int?
        var reading: RestInfo.Reading?
        /// The request itself failed.
        var failure: String?

        var info: RestInfo? {
            if case .info(let i)? = reading { return i }
            return nil
        }
    }

    struct Response: Sendable, Equatable {
        var status: Int
        var contentType: String?
        var challenges: [AuthChallenge]
        var arcgisError: ArcGISErrorBody?
        /// A redirect's target (its query removed).
        var location: String?
        /// Not verified: the certificate failed, and this answer was read without verification to see what
        /// else the service needs (nothing secret was sent).
        var readWithoutVerification = false
    }
}
