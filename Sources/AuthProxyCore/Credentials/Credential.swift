/// Where an injected token goes.
public enum TokenPlacement: String, Sendable, CaseIterable {
    /// `token` query parameter for GET/HEAD/DELETE, form field for urlencoded bodies, query parameter otherwise.
    case param
    /// `X-Esri-Authorization: Bearer …`: keeps tokens out of URLs and logs of intermediate servers.
    case header
}

/// One `[[credential]]` entry, validated: what every kind shares (name, match prefixes, layer, limits), around its
/// kind (``CredentialKind``), which holds the kind's own settings and behaviour.
public struct Credential: Sendable {
    /// The kind's settings and behaviour. Kinds are values in a box of their own (an existential), so the
    /// credential copied into every plan and exchange stays a few words.
    public var kind: any CredentialKind
    public var name: String
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
    /// `scrub_responses`: whether the values it injects are masked in response bodies too (not only in heads);
    /// nil: the kind's default (``CredentialKind/scrubsResponseBodiesByDefault``).
    public var scrubResponses: Bool? = nil
    public var line: Int

    public init(
        name: String, kind: any CredentialKind, match: [MatchPrefix], placement: TokenPlacement,
        overrideClientToken: Bool, upgradeToHTTPS: Bool = false, rateLimit: RateLimit? = nil,
        allowJSONP: Bool = false, prefetch: Bool = false, refresh: RefreshMode = .ahead, intercept: Bool = true,
        layer: Layer = .service, scrubResponses: Bool? = nil, line: Int
    ) {
        self.name = name
        self.kind = kind
        self.match = match
        self.placement = placement
        self.overrideClientToken = overrideClientToken
        self.upgradeToHTTPS = upgradeToHTTPS
        self.rateLimit = rateLimit
        self.allowJSONP = allowJSONP
        self.prefetch = prefetch
        self.refresh = refresh
        self.intercept = intercept
        self.layer = layer
        self.scrubResponses = scrubResponses
        self.line = line
    }

    public enum Layer: String, Sendable, CaseIterable {
        case service
        case gateway
    }

    /// Whether tokens come from a token service (and so can be refreshed after a rejection).
    public var isRefreshable: Bool { kind.tokenSource == .fetched }

    /// Whether a rejection of what it applied can be answered by sending the request again with something else:
    /// a refreshed token, or an API key's other slot. Such requests keep a replay copy of their body.
    public var retriesRejections: Bool { kind.retriesRejections }

    /// Whether its refresh token comes from `authproxy login` (kept in the state file, which `login` and `signout`
    /// change under a running proxy).
    public var signsIn: Bool { kind.signsIn }

    /// Whether the values it injects are masked in response bodies.
    public var scrubsResponseBodies: Bool { scrubResponses ?? kind.scrubsResponseBodiesByDefault }

    /// Every setting, secrets included, as one string: hashed, it binds cached tokens to the exact credential
    /// that produced them, so a changed password or client secret never reuses an old token. (Its form is kept
    /// stable: stored sign-ins are found by its digest.)
    var identityMaterial: String {
        "\(name)\u{0}\(kind.typeName)\u{0}\(match.map(\.description).joined(separator: ","))\u{0}"
            + kind.identityMaterial + "\u{0}\(layer.rawValue)"
    }
}
