/// A kind of `[[credential]]` (`type = "…"`): what the proxy does differently per kind lives behind this protocol, in
/// the kind's own folder under `Credentials/Kinds/`, and the planner, the executor, the token service and the
/// configuration loader call it without knowing which kind they hold. A new kind is a folder, one line in
/// ``CredentialKinds/all`` and its docs (docs/ARCHITECTURE.md, "How to add a credential kind").
///
/// A kind is a value (its validated settings); the credential around it (``Credential``) holds what every kind
/// shares: name, match prefixes, layer, rate limit, refresh mode.
public protocol CredentialKind: Sendable {
    /// `type = "…"` in `[[credential]]`.
    static var typeName: String { get }

    /// Reads the kind's own keys from its `[[credential]]` table; the loader has read the shared ones (`name`,
    /// `type`, `match`, `placement`, `layer`, …) and rejects every key nobody read, so a typo is never ignored.
    /// Errors name the key and its line, never a secret's value (``TableReader/shown(_:_:)``).
    static func parse(_ entry: inout TableReader, name: String) throws(ConfigError) -> Self

    /// Whether it acts on requests (one per request, the longest match among the token kinds, plus the gateway
    /// layer) or on connections (network kinds combine, one per ``NetworkSlot``).
    var role: CredentialRole { get }

    /// Every setting, secrets included, as one string: hashed, it binds cached tokens to the exact settings that
    /// produced them, so a changed password or key never reuses an old token.
    var identityMaterial: String { get }

    /// How it gets what it puts on a request.
    var tokenSource: TokenSource { get }

    /// Before anything is obtained: whether the client's request already carries its own credential of this kind
    /// (then it is left alone, unless the credential sets `override_client_token`), and whether the request body
    /// must be held whole to apply the credential (a form field, a payload hash).
    func prepare(_ request: RequestView) -> Preparation

    /// Applies the credential, with its token when ``tokenSource`` obtains one, to the request exactly as it will be
    /// written upstream: after GET→POST and the gateway layer, before ``OutboundHead``'s check. Returns why it could
    /// not, as the client's answer (nothing goes upstream then).
    func apply(_ token: IssuedToken?, to request: inout OutgoingRequest) -> ApplyFailure?

    /// Whether the upstream's response head says the applied credential was rejected (a new token may help).
    func rejection(of head: ResponseView) -> Rejection

    /// After ``rejection(of:)`` answered ``Rejection/readBody``: what the held body (at most
    /// ``TokenRejection/lookAhead`` bytes, as received) says. A rejection of a kind whose token can be refreshed is
    /// retried as one read from the head; the note, if any, is logged (a warning naming the credential) whatever
    /// the verdict, and the answer is relayed unchanged when nothing is retried.
    func rejection(of head: ResponseView, body: [UInt8]) -> BodyVerdict

    /// The values this credential puts on requests that must never reach a client: masked in every response head,
    /// and in response bodies when ``scrubsResponseBodies``.
    func secrets(token: IssuedToken?) -> [String]

    /// Whether its secrets are masked in response bodies too (servers that echo a URL's query in what they
    /// answer: GeoServer capabilities backlinks, tile JSON, error pages). `scrub_responses` overrides it.
    var scrubsResponseBodiesByDefault: Bool { get }

    /// Rows for the status page (`name = value`, nothing secret).
    var statusDetails: [(String, String)] { get }

    /// The shared `[[credential]]` keys that mean something for this kind (the loader refuses the others).
    static var sharedKeys: SharedCredentialKeys { get }

    /// Whether it can fetch tokens (``FetchedTokenKind``), for the messages about `prefetch` and `refresh`.
    static var fetchesTokens: Bool { get }

    /// Its keys that hold secrets: their values are never quoted in a configuration error, even when written
    /// literally.
    static var secretKeys: Set<String> { get }

    /// Whether the upstream's answers are read for a rejection at all (``rejection(of:)``): a kind with nothing
    /// to switch to (one API key, static fields) relays its answers unread.
    var inspectsResponses: Bool { get }

    /// Whether a rejection can be answered by sending the request again with something else (a refreshed token,
    /// another key): such requests keep a replay copy of their body.
    var retriesRejections: Bool { get }

    /// Whether ``rejection(of:)`` may answer ``Rejection/readBody``: the response must then come back in a coding
    /// the body reader decodes (never `br` or `zstd`).
    var readsBodiesForRejection: Bool { get }

    /// The request fields (lowercased names) and query parameters (`?name`) it sets: two credentials on one request
    /// (a gateway and a service) may not set the same one.
    var occupies: [String] { get }

    /// Whether its refresh token comes from `authproxy login` (kept in the state file).
    var signsIn: Bool { get }

    /// A redirect answering a request with its token that sends the client to sign in (the token was not
    /// accepted): nil when the head is no such redirect, or the kind is not behind a sign-in page.
    func signInRedirect(of head: ResponseView) -> SignInRedirect.Target?

    /// What of it lapses by itself (a key's or certificate's expiry), for the status page and `/metrics`.
    func expiries(credential: String) -> [CredentialExpiry]

    /// Whether `other` holds the same settings (a reload keeps what did not change).
    func isSame(as other: any CredentialKind) -> Bool

    /// A ``TokenSource/fixed`` kind's value to apply now, or why there is none; nil for other kinds. (A requirement
    /// rather than a cast to ``FixedTokenKind``: a conformance lookup on every request showed in the relay's profile.)
    func fixedToken(_ c: Credential, service: TokenService) -> Result<IssuedToken, TokenError>?

    /// Whether ``secrets(token:)`` is exactly the token (the response path then masks it without a list).
    var secretIsItsToken: Bool { get }

    /// How `authproxy check` describes where it puts its token, when the kind has a placement of its own (nil: the
    /// shared `token_placement`, or none).
    var placementDescription: String? { get }

    /// What `authproxy check` adds after the type in the credential's line (`, client=referer (…)`).
    var checkAttributes: String { get }

    /// Warnings for `authproxy check` and the start-up log: what has expired or soon will (never a secret).
    func expiryWarnings(credential: String, now: Int64, warningDays: Int) -> [String]

    /// Metrics of its own in `/metrics` for `credentials` (all of this kind), read when scraped: one block per kind,
    /// so each family's `# HELP`/`# TYPE` lines appear once.
    static func scrapeText(_ credentials: [Credential], tokens: TokenService?) -> String

    /// `authproxy login` for credential `c`: the sign-in flow of the kinds that sign in (an authorization code).
    func signInFlow(_ c: Credential, fetch: SyncFetch) throws(StateError) -> any AuthorizationCodeFlow
}

/// The `[[credential]]` keys shared by several kinds, each read only for the kinds that declare it.
public struct SharedCredentialKeys: OptionSet, Sendable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    /// `token_placement`: `param` or `header` (ArcGIS tokens and keys).
    public static let tokenPlacement = SharedCredentialKeys(rawValue: 1)
    /// `layer = "gateway"`: the kind may stand in front of the service credential.
    public static let gatewayLayer = SharedCredentialKeys(rawValue: 4)
}

/// What a credential acts on.
public enum CredentialRole: Sendable, Equatable {
    /// Requests: injected fields, query parameters, form fields or a signature.
    case token
    /// Connections: a TLS setting or an authentication handshake libcurl answers.
    case network(NetworkSlot)
}

/// The network credentials a request combines, one of each (``NetworkAuth``).
public enum NetworkSlot: Sendable, Equatable, CaseIterable {
    case trust, certificate, password, kerberos
}

/// How a kind obtains what it applies.
public enum TokenSource: Sendable, Equatable {
    /// Nothing to obtain: its settings are applied as they are (header fields, query parameters, a signature
    /// with static keys). ``CredentialKind/apply(_:to:)`` gets nil.
    case none
    /// A value held in the configuration with its own validity (an API key's slots, a pregenerated token): read
    /// through ``FixedTokenKind``.
    case fixed
    /// Fetched by the token service (single flight, cached per scope, shared with the fleet), through
    /// ``FetchedTokenKind``: it can be refreshed after a rejection.
    case fetched

    /// As `/status.json` names it.
    var statusName: String {
        switch self {
        case .none: return "none"
        case .fixed: return "fixed"
        case .fetched: return "fetched"
        }
    }
}

/// What ``CredentialKind/prepare(_:)`` decides before the token is obtained.
public struct Preparation: Sendable, Equatable {
    /// The client brings its own credential of this kind: the request goes as it is.
    public var clientHasOwn = false
    /// The kind does not apply to this request at all (an ArcGIS token outside the ArcGIS APIs: no token is
    /// obtained for a portal's home page).
    public var applies = true
    /// The request body must be held whole to apply the credential (an urlencoded form a token or parameter goes
    /// into, a body whose hash is signed): up to this many bytes; nil: the body streams.
    public var holdsBodyUpTo: Int? = nil

    public init(applies: Bool = true, clientHasOwn: Bool = false, holdsBodyUpTo: Int? = nil) {
        self.applies = applies
        self.clientHasOwn = clientHasOwn
        self.holdsBodyUpTo = holdsBodyUpTo
    }
}

/// A kind's reading of a response head.
public enum Rejection: Sendable, Equatable {
    /// Not a rejection.
    case none
    /// The head says the credential was rejected.
    case rejected
    /// The body may say it (an ArcGIS JSON error with code 498/499): hold a small body and look.
    case readBody
}

/// A kind's reading of a held response body (``CredentialKind/rejection(of:body:)``).
public struct BodyVerdict: Sendable, Equatable {
    /// The body says the credential was rejected.
    public var rejected: Bool
    /// What the log should say about it (the cause an operator acts on), nil: nothing.
    public var note: String?
    /// Log metadata beside the note (never a secret).
    public var details: [String: String]

    public init(rejected: Bool, note: String? = nil, details: [String: String] = [:]) {
        self.rejected = rejected
        self.note = note
        self.details = details
    }
}

/// Why a credential could not be applied: the client's answer, naming the credential and the cause.
public struct ApplyFailure: Error, Sendable, Equatable {
    public var status: Int
    public var message: String
    public var details: [String]

    public init(status: Int = 502, message: String, details: [String] = []) {
        self.status = status
        self.message = message
        self.details = details
    }
}

extension CredentialKind {
    public var typeName: String { Self.typeName }
    public var tokenSource: TokenSource { .none }
    public func prepare(_ request: RequestView) -> Preparation { Preparation() }
    public func apply(_ token: IssuedToken?, to request: inout OutgoingRequest) -> ApplyFailure? { nil }
    public func rejection(of head: ResponseView) -> Rejection { .none }
    public func rejection(of head: ResponseView, body: [UInt8]) -> BodyVerdict { BodyVerdict(rejected: false) }
    public func secrets(token: IssuedToken?) -> [String] { token.map { [$0.value] } ?? [] }
    public var scrubsResponseBodiesByDefault: Bool { false }
    public var statusDetails: [(String, String)] { [] }
    public static var sharedKeys: SharedCredentialKeys { [] }
    public static var secretKeys: Set<String> { [] }
    public static var fetchesTokens: Bool { false }
    public var inspectsResponses: Bool { tokenSource != .none }
    public var retriesRejections: Bool { tokenSource == .fetched }
    public var readsBodiesForRejection: Bool { false }
    public var occupies: [String] { [] }
    public var signsIn: Bool { false }
    public func signInRedirect(of head: ResponseView) -> SignInRedirect.Target? { nil }

    /// Whether it puts something on requests (the others act on connections).
    public var isToken: Bool { role == .token }

    public func expiries(credential: String) -> [CredentialExpiry] { [] }
    public var placementDescription: String? { nil }
    public func fixedToken(_ c: Credential, service: TokenService) -> Result<IssuedToken, TokenError>? { nil }
    public var secretIsItsToken: Bool { false }
    public static func scrapeText(_ credentials: [Credential], tokens: TokenService?) -> String { "" }
    public var checkAttributes: String { "" }
    public func expiryWarnings(credential: String, now: Int64, warningDays: Int) -> [String] { [] }
    public func signInFlow(_ c: Credential, fetch: SyncFetch) throws(StateError) -> any AuthorizationCodeFlow {
        throw StateError("credential '\(c.name)' is of type \(Self.typeName); login is for oauth-user credentials")
    }
}

extension CredentialKind where Self: Equatable {
    public func isSame(as other: any CredentialKind) -> Bool { (other as? Self) == self }
}
