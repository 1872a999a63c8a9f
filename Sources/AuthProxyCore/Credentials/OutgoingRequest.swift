/// The request as the client sent it, before a credential is applied: what ``CredentialKind/prepare(_:)`` reads.
public struct RequestView {
    public var method: String
    /// The URL credentials are matched on (the client's, its path normalised), with its query.
    public var target: URLTarget
    public var fields: HTTPHeaders
    /// How many body bytes follow: nil none, -1 chunked.
    public var bodyLength: Int64?
    /// A WebSocket handshake (`Upgrade`).
    public var isUpgrade: Bool
    /// The credential's `token_placement`.
    public var placement: TokenPlacement
    /// The body, once the proxy holds it whole (after ``Preparation/holdsBodyUpTo`` asked for it); nil before.
    public var body: [UInt8]? = nil

    public init(
        method: String, target: URLTarget, fields: HTTPHeaders, bodyLength: Int64?, isUpgrade: Bool,
        placement: TokenPlacement = .param
    ) {
        self.method = method
        self.target = target
        self.fields = fields
        self.bodyLength = bodyLength
        self.isUpgrade = isUpgrade
        self.placement = placement
    }

    /// Whether the body is an urlencoded form.
    public var isForm: Bool { TokenInjection.isForm(fields) }
}

/// The request exactly as it will be written upstream (method, target, fields, and the body when the proxy holds it
/// whole): what ``CredentialKind/apply(_:to:)`` changes. Applying happens after GET→POST and the gateway layer, so a
/// signature covers what is really sent.
public struct OutgoingRequest {
    public var method: String
    public var target: URLTarget
    public var fields: HTTPHeaders
    /// The body, when the proxy holds it whole (a collected form, a form made from a long GET, a body held for a
    /// signature: ``Preparation/holdsBodyUpTo``); nil when it streams or there is none.
    public var body: [UInt8]?
    /// How many body bytes go upstream: nil none, -1 chunked (``body``'s count when held).
    public var bodyLength: Int64?
    public var isUpgrade: Bool
    /// Now, in milliseconds since the epoch (a signature's date).
    public var now: Int64
    /// The credential's name, for messages.
    public var credential: String
    /// The credential's `placement` (where a token goes for kinds that offer a choice).
    public var placement: TokenPlacement
    /// Which layer applies: a gateway's token leaves the service's `Authorization` alone.
    public var layer: Credential.Layer = .service

    public init(
        method: String, target: URLTarget, fields: HTTPHeaders, body: [UInt8]?, bodyLength: Int64?,
        isUpgrade: Bool, now: Int64, credential: String, placement: TokenPlacement = .param
    ) {
        self.method = method
        self.target = target
        self.fields = fields
        self.body = body
        self.bodyLength = bodyLength
        self.isUpgrade = isUpgrade
        self.now = now
        self.credential = credential
        self.placement = placement
    }

    /// Whether the held body is an urlencoded form.
    public var isForm: Bool { body != nil && TokenInjection.isForm(fields) }
}

/// A response head as a kind reads it for a rejection.
public struct ResponseView {
    public var status: Int
    /// The request it answers (as sent upstream).
    public var request: URLTarget
    private let fields: Fields

    /// Where the fields are read: the exchange's own response head (read in place: a view is made for every
    /// response a credential inspects, so it neither copies the fields out nor allocates a closure), or a lookup
    /// (tests, and callers that hold fields some other way).
    private enum Fields {
        case head(ResponseHeadAssembler)
        case lookup((String) -> [String])
    }

    public init(status: Int, request: URLTarget, field: @escaping (String) -> [String]) {
        self.status = status
        self.request = request
        self.fields = .lookup(field)
    }

    init(request: URLTarget, head: ResponseHeadAssembler) {
        self.status = head.status
        self.request = request
        self.fields = .head(head)
    }

    /// The values of a field (lowercased name).
    public func values(_ lowercasedName: String) -> [String] {
        switch fields {
        case .head(let h): return h.values(named: lowercasedName)
        case .lookup(let f): return f(lowercasedName)
        }
    }

    public func first(_ lowercasedName: String) -> String? {
        switch fields {
        case .head(let h): return h.first(named: lowercasedName)
        case .lookup(let f): return f(lowercasedName).first
        }
    }
}
