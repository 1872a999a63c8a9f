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
    /// The settings live in one immutable box: a credential is copied into every plan and exchange (and read there
    /// many times per request), so a copy is one retain rather than a copy of every field and of the kind's
    /// existential, and reading a field is a plain load (no exclusivity check, as for a class's `var`). A change
    /// (the loader's, a certificate renewal's) makes a new box.
    private var box: Box

    private final class Box: Sendable {
        let settings: Settings
        init(_ settings: Settings) { self.settings = settings }
    }

    private struct Settings: Sendable {
        var kind: any CredentialKind
        var name: String
        var match: [MatchPrefix]
        var placement: TokenPlacement
        var overrideClientToken: Bool
        var upgradeToHTTPS: Bool
        var rateLimit: RateLimit?
        var limits = CredentialLimits()
        var allowJSONP: Bool
        var prefetch: Bool
        var refresh: RefreshMode
        var intercept: Bool
        var layer: Layer
        var scrubResponses: Bool?
        var printServices: [MatchPrefix] = []
        var line: Int
    }

    private mutating func change(_ edit: (inout Settings) -> Void) {
        var s = box.settings
        edit(&s)
        box = Box(s)
    }

    /// The kind's settings and behaviour (``CredentialKind``).
    public var kind: any CredentialKind {
        _read { yield box.settings.kind }
        set { change { $0.kind = newValue } }
    }
    public var name: String {
        _read { yield box.settings.name }
        set { change { $0.name = newValue } }
    }
    public var match: [MatchPrefix] {
        _read { yield box.settings.match }
        set { change { $0.match = newValue } }
    }
    public var placement: TokenPlacement {
        get { box.settings.placement }
        set { change { $0.placement = newValue } }
    }
    public var overrideClientToken: Bool {
        get { box.settings.overrideClientToken }
        set { change { $0.overrideClientToken = newValue } }
    }
    /// Send matched `http://` requests upstream over https (the zero-setup alternative to interception).
    public var upgradeToHTTPS: Bool {
        get { box.settings.upgradeToHTTPS }
        set { change { $0.upgradeToHTTPS = newValue } }
    }
    /// Requests each client may send through this credential (`rate_limit`); nil: unlimited.
    public var rateLimit: RateLimit? {
        get { box.settings.rateLimit }
        set { change { $0.rateLimit = newValue } }
    }
    /// `max_concurrent` (with its queue) and `daily_quota`.
    public var limits: CredentialLimits {
        get { box.settings.limits }
        set { change { $0.limits = newValue } }
    }
    /// Whether JSONP (`callback=`) answers may be read through the `/proxy` endpoint with this credential.
    public var allowJSONP: Bool {
        get { box.settings.allowJSONP }
        set { change { $0.allowJSONP = newValue } }
    }
    /// Fetch a token at start-up and keep it fresh before any request needs it; `/readyz` waits for it.
    public var prefetch: Bool {
        get { box.settings.prefetch }
        set { change { $0.prefetch = newValue } }
    }
    /// When a new token is fetched: ahead of need (in the background), or only when a request needs one
    /// (``RefreshMode``). Meaningful for credentials that fetch tokens (``isRefreshable``).
    public var refresh: RefreshMode {
        get { box.settings.refresh }
        set { change { $0.refresh = newValue } }
    }
    /// `intercept = false`: a CONNECT to a host:port this credential matches stays a blind tunnel, whatever other
    /// credentials match it (a Windows login bound to the server certificate cannot pass through interception).
    public var intercept: Bool {
        get { box.settings.intercept }
        set { change { $0.intercept = newValue } }
    }
    /// `layer = "gateway"`: applies together with the service credential matching the same request (an
    /// identity-aware proxy in front of ArcGIS); `"service"` (default): competes with the other service
    /// credentials by longest match.
    public var layer: Layer {
        get { box.settings.layer }
        set { change { $0.layer = newValue } }
    }
    /// `scrub_responses`: whether the values it injects are masked in response bodies too (not only in heads);
    /// nil: the kind's default (``CredentialKind/scrubsResponseBodiesByDefault``).
    public var scrubResponses: Bool? {
        get { box.settings.scrubResponses }
        set { change { $0.scrubResponses = newValue } }
    }
    /// `print_services`: the ArcGIS print services (URL prefixes) that may receive this credential's tokens inside
    /// a print job's `Web_Map_as_JSON` (``PrintRequest``); empty: none.
    public var printServices: [MatchPrefix] {
        _read { yield box.settings.printServices }
        set { change { $0.printServices = newValue } }
    }
    public var line: Int {
        get { box.settings.line }
        set { change { $0.line = newValue } }
    }

    public init(
        name: String, kind: any CredentialKind, match: [MatchPrefix], placement: TokenPlacement,
        overrideClientToken: Bool, upgradeToHTTPS: Bool = false, rateLimit: RateLimit? = nil,
        allowJSONP: Bool = false, prefetch: Bool = false, refresh: RefreshMode = .ahead, intercept: Bool = true,
        layer: Layer = .service, scrubResponses: Bool? = nil, line: Int
    ) {
        box = Box(
            Settings(
                kind: kind, name: name, match: match, placement: placement, overrideClientToken: overrideClientToken,
                upgradeToHTTPS: upgradeToHTTPS, rateLimit: rateLimit, allowJSONP: allowJSONP, prefetch: prefetch,
                refresh: refresh, intercept: intercept, layer: layer, scrubResponses: scrubResponses, line: line))
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
