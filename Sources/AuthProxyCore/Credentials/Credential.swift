/// Where an injected token goes.
public enum TokenPlacement: String, Sendable, CaseIterable {
    /// `token` query parameter for GET/HEAD/DELETE, form field for urlencoded bodies, query parameter otherwise.
    case param
    /// `X-Esri-Authorization: Bearer …`: keeps tokens out of URLs and logs of intermediate servers.
    case header
}

/// One `[[credential]]` entry, validated. Token-type credentials put an ArcGIS token or API key on the
/// requests they match.
public struct Credential: Sendable {
    // indirect: the settings live in a box, so the credential copied into every plan and exchange is a few words
    // (its payloads reach ~280 bytes inline), not a memcpy per request.
    public indirect enum Kind: Sendable, Equatable {
        /// An API key (one or two slots, each with its expiry), injected as is: see ``APIKeySettings``.
        case apiKey(APIKeySettings)
        /// A pregenerated token; `expires` in milliseconds since the epoch.
        case token(token: String, referer: String?, expires: Int64?)
        /// `generateToken` with a username and password.
        case arcgisToken(ArcGISTokenSettings)
        /// OAuth 2.0 client-credentials grant.
        case oauthApp(OAuthAppSettings)
        /// OAuth 2.0 refresh-token grant, with a refresh token obtained by `authproxy login`.
        case oauthUser(OAuthUserSettings)
        /// A generic OAuth 2.0 / OIDC client: a bearer token on every matched request (not only ArcGIS APIs).
        case oauth2(OAuth2Settings)
        /// How to verify the TLS certificate of matched upstreams (a network-type credential).
        case serverTrust(ServerTrustSettings)
        /// Answers the upstream's 401 with Basic, Digest or NTLM (network type).
        case password(PasswordSettings)
        /// Negotiate (SPNEGO/Kerberos) with a ticket the proxy obtains itself (network type).
        case kerberos(KerberosSettings)
        /// A client certificate for mutual TLS (network type).
        case certificate(ClientCertificateSettings)
        /// Static header fields set on matched requests (an API gateway's key, an identity-aware proxy's
        /// service token), replacing the client's fields of the same names.
        case header([HeaderField])

        public var typeName: String {
            switch self {
            case .apiKey: return "api-key"
            case .token: return "token"
            case .arcgisToken: return "arcgis-token"
            case .oauthApp: return "oauth-app"
            case .oauthUser: return "oauth-user"
            case .oauth2: return "oauth2"
            case .serverTrust: return "server-trust"
            case .password: return "password"
            case .kerberos: return "kerberos"
            case .certificate: return "certificate"
            case .header: return "header"
            }
        }

        /// Token-type credentials put a token on requests; the others act on the connection.
        public var isToken: Bool {
            switch self {
            case .apiKey, .token, .arcgisToken, .oauthApp, .oauthUser, .oauth2, .header: return true
            case .serverTrust, .password, .kerberos, .certificate: return false
            }
        }
    }

    public var name: String
    public var kind: Kind
    public var match: [MatchPrefix]
    public var placement: TokenPlacement
    public var overrideClientToken: Bool
    /// Send matched `http://` requests upstream over https (the zero-setup alternative to interception).
    public var upgradeToHTTPS: Bool = false
    /// Requests each client may send through this credential (`rate_limit`); nil: unlimited.
    public var rateLimit: RateLimit? = nil
    /// Whether JSONP (`callback=`) answers may be read through the `/proxy` endpoint with this credential.
    public var allowJSONP: Bool = false
    /// Fetch a token at start-up and keep it fresh before any request needs it; `/readyz` waits for it.
    public var prefetch: Bool = false
    /// When a new token is fetched: ahead of need (in the background), or only when a request needs one
    /// (``RefreshMode``). Meaningful for credentials that fetch tokens (``isRefreshable``).
    public var refresh: RefreshMode = .ahead
    /// `intercept = false`: a CONNECT to a host:port this credential matches stays a blind tunnel, whatever other
    /// credentials match it (a Windows login bound to the server certificate cannot pass through interception).
    public var intercept: Bool = true
    /// `layer = "gateway"`: applies together with the service credential matching the same request (an
    /// identity-aware proxy in front of ArcGIS); `"service"` (default): competes with the other service
    /// credentials by longest match.
    public var layer: Layer = .service
    /// `sign_in_urls`: where the web tier sends a client to sign in, besides a portal's sign-in and a SAML request
    /// (``SignInRedirect``); a redirect there answering a request with this credential's token rejects the token.
    public var signInURLs: [String] = []
    public var line: Int

    public enum Layer: String, Sendable, CaseIterable {
        case service
        case gateway
    }

    /// Whether tokens come from a token service (and so can be refreshed after a 498/499).
    public var isRefreshable: Bool {
        switch kind {
        case .apiKey, .token, .serverTrust, .password, .kerberos, .certificate, .header: return false
        case .arcgisToken, .oauthApp, .oauthUser, .oauth2: return true
        }
    }

    /// The `api-key` settings, when this is one.
    public var apiKey: APIKeySettings? {
        if case .apiKey(let k) = kind { return k }
        return nil
    }

    /// Whether a rejection of its token (498/499 in any form) can be answered by sending the request again with
    /// another token: a refreshed one, or an API key's other slot. Such requests keep a replay copy of their body and
    /// have their responses read in a coding the rejection sniffer understands.
    public var retriesRejections: Bool {
        if let k = apiKey { return k.slots.count > 1 }
        return isRefreshable
    }

    /// Whether its refresh token comes from `authproxy login` (kept in the state file, which `login` and `signout`
    /// change under a running proxy): `oauth-user`, and `oauth2` with the `authorization_code` grant.
    public var signsIn: Bool {
        switch kind {
        case .oauthUser: return true
        case .oauth2(let o): return o.grant == .authorizationCode
        default: return false
        }
    }

    /// The `oauth2` settings, when this is one: its token is a bearer token for every matched request, with its
    /// own injection and rejection rules (``OAuth2Injection``, ``OAuth2Rejection``) instead of ArcGIS's.
    public var oauth2: OAuth2Settings? {
        if case .oauth2(let o) = kind { return o }
        return nil
    }

    /// Every setting, secrets included, as one string: hashed, it binds cached tokens to the exact credential
    /// that produced them, so a changed password or client secret never reuses an old token.
    var identityMaterial: String {
        var s = "\(name)\u{0}\(kind.typeName)\u{0}\(match.map(\.description).joined(separator: ","))\u{0}"
        switch kind {
        case .apiKey(let k):
            s += k.slots.map { "\($0.number)\u{0}\($0.key)\u{0}\($0.expires ?? 0)" }.joined(separator: "\u{0}")
            s += "\u{0}\(k.referer ?? "")"
        case .token(let t, let r, let e): s += "\(t)\u{0}\(r ?? "")\u{0}\(e ?? 0)"
        case .arcgisToken(let a):
            s +=
                "\(a.username)\u{0}\(a.password)\u{0}\(a.tokenURL ?? "")\u{0}\(a.referer ?? "")\u{0}\(a.expirationMinutes ?? 0)\u{0}\(a.client)"
        case .oauthApp(let o):
            s += "\(o.clientID)\u{0}\(o.clientSecret)\u{0}\(o.portalURL)\u{0}\(o.expirationMinutes ?? 0)"
        case .oauthUser(let o): s += "\(o.clientID)\u{0}\(o.portalURL)\u{0}\(o.redirectURI)"
        case .oauth2(let o): s += o.identityMaterial
        case .serverTrust(let t): s += "\(t.caFile ?? "")\u{0}\(t.pinnedPublicKey ?? "")\u{0}\(t.insecure)"
        case .password(let pw): s += "\(pw.username)\u{0}\(pw.password)\u{0}\(pw.domain ?? "")"
        case .kerberos(let k): s += "\(k.principal)\u{0}\(k.keytab ?? "")\u{0}\(k.password ?? "")"
        case .certificate(let c): s += "\(c.file ?? "")\u{0}\(c.cert ?? "")\u{0}\(c.key ?? "")"
        case .header(let fields): s += fields.map { "\($0.name)\u{0}\($0.value)" }.joined(separator: "\u{0}")
        }
        s += "\u{0}\(layer.rawValue)"
        return s
    }
}

/// One header field a `header` credential sets.
public struct HeaderField: Sendable, Equatable {
    public var name: String
    public var value: String

    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }

    /// Fields the proxy owns (framing, routing, hop-by-hop) or that would change what the request is: never set
    /// by a credential.
    static let refused: Set<String> = [
        "host", "content-length", "transfer-encoding", "connection", "keep-alive",
        "proxy-connection", "proxy-authorization", "proxy-authenticate", "te", "trailer", "upgrade", "expect", "via",
    ]

    /// Why `name` cannot be set by a credential, nil when it can: an RFC 9110 token not in ``refused``.
    static func problem(name: String) -> String? {
        let tchar = Set("!#$%&'*+-.^_`|~".utf8)
        guard !name.isEmpty,
            name.utf8.allSatisfy({
                ($0 >= 48 && $0 <= 57) || ($0 | 0x20 >= 97 && $0 | 0x20 <= 122) || tchar.contains($0)
            })
        else { return "is not a header field name" }
        if refused.contains(name.lowercased()) { return "is a field the proxy itself manages" }
        return nil
    }
}

public struct ArcGISTokenSettings: Sendable, Equatable {
    public var username: String
    public var password: String
    /// nil: discovered from `<server root>/rest/info?f=json`.
    public var tokenURL: String?
    /// The referer tokens are bound to (with `client` "referer"): the configured one, else the credential's
    /// synthetic one (``TokenBinding/syntheticReferer(credential:)``).
    public var referer: String?
    /// nil: the server's `shortLivedTokenValidity`.
    public var expirationMinutes: Int?
    /// `client` field of generateToken: "referer" (the default) or "requestip"/"ip" when configured.
    public var client: String
    /// Whether ``referer`` is the synthetic one (no `referer` configured).
    public var syntheticReferer: Bool = false
}

public struct OAuthAppSettings: Sendable, Equatable {
    public var clientID: String
    public var clientSecret: String
    /// The portal root, e.g. `https://www.arcgis.com` or `https://host/portal`.
    public var portalURL: String
    public var expirationMinutes: Int?
}

public struct OAuthUserSettings: Sendable, Equatable {
    public var clientID: String
    public var portalURL: String
    public var redirectURI: String
}

public struct ServerTrustSettings: Sendable, Hashable {
    /// Extra CA bundle (PEM) trusted for matched hosts, in addition to the system CAs.
    public var caFile: String?
    /// `sha256//<base64>` of the upstream's public key; the pin replaces chain verification (self-signed
    /// servers), the host name is still checked.
    public var pinnedPublicKey: String?
    /// No verification at all (logged as a warning at start).
    public var insecure: Bool
    /// The contents of `caFile` as the configuration was loaded, given to libcurl as they are (not the path,
    /// which it would read again, and by which it matches cached connections).
    public var caBundle: [UInt8]? = nil
    /// SHA-256 of ``caBundle``: pooled connections are kept apart by it, so a reload that changes only the
    /// bundle's contents (a compromised CA removed) never reuses a connection verified with the old one.
    public var caDigest: String? = nil

    public init(caFile: String?, pinnedPublicKey: String?, insecure: Bool, caBundle: [UInt8]? = nil) {
        self.caFile = caFile
        self.pinnedPublicKey = pinnedPublicKey
        self.insecure = insecure
        self.caBundle = caBundle
        caDigest = caBundle.map { Crypto.hex(Crypto.sha256($0)) }
    }

    // The digest stands for the contents: hashing a whole bundle per pooled request would cost more than the
    // request.
    public static func == (a: Self, b: Self) -> Bool {
        a.caFile == b.caFile && a.caDigest == b.caDigest && a.pinnedPublicKey == b.pinnedPublicKey
            && a.insecure == b.insecure
    }

    public func hash(into h: inout Hasher) {
        h.combine(caFile)
        h.combine(caDigest)
        h.combine(pinnedPublicKey)
        h.combine(insecure)
    }
}

/// HTTP authentication schemes a `password` credential may use.
public enum PasswordScheme: String, Sendable, CaseIterable {
    case basic, digest, ntlm
}

public struct PasswordSettings: Sendable, Equatable {
    public var username: String
    public var password: String
    /// NTLM domain: the user is sent as `DOMAIN\user`.
    public var domain: String?
    public var schemes: Set<PasswordScheme>
    /// Basic sends the password in clear: only over https unless this is set.
    public var allowBasicOverHTTP: Bool

    /// The user name as libcurl should send it.
    public var curlUser: String { domain.map { "\($0)\\\(username)" } ?? username }

    /// Why a 401 whose challenges offered `offered` (scheme names, any case) was not answered with this
    /// credential, when the cause is its settings rather than a wrong password: nil when it could answer.
    public func unanswerable(offered: [String], overHTTPS: Bool) -> String? {
        let schemesOffered = Set(offered.map { $0.lowercased() })
        var usable = schemes
        if !overHTTPS && !allowBasicOverHTTP { usable.remove(.basic) }
        guard !schemesOffered.isEmpty,
            !schemesOffered.contains(where: { PasswordScheme(rawValue: $0).map(usable.contains) ?? false })
        else { return nil }
        if schemesOffered.contains("basic"), schemes.contains(.basic), !overHTTPS, !allowBasicOverHTTP {
            return "the server offers Basic, which is not sent over http (it carries the password in clear) "
                + "unless the credential sets allow_basic_over_http = true; or use https"
        }
        let allowed = schemes.map(\.rawValue).sorted().joined(separator: ", ")
        return
            "the server offers \(schemesOffered.sorted().joined(separator: ", ")); the credential's schemes are \(allowed)"
    }
}

public struct KerberosSettings: Sendable, Equatable {
    public var principal: String
    public var keytab: String?
    public var password: String?
}

public struct ClientCertificateSettings: Sendable, Equatable {
    /// PKCS#12 (.p12/.pfx) file, with `password`.
    public var file: String?
    public var password: String?
    /// Or PEM certificate and key, with an optional key password.
    public var cert: String?
    public var key: String?
    public var keyPassword: String?
    /// The files' contents as last loaded and checked (at start, by a reload, or when a renewed file was
    /// adopted): what connections are made with. Compared by digest, so pooled connections made with another
    /// certificate are kept apart.
    public var material: ClientCertificateMaterial? = nil
}
