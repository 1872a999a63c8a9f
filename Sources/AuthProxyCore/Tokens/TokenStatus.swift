/// What the status page and `/readyz` show of one token cache key (`credential|server root`): never the token,
/// only its times and state.
public struct TokenStatus: Sendable, Equatable, Codable {
    public enum State: String, Sendable, Codable {
        /// A token is held and usable.
        case valid
        /// A token request is running (first one, or a refresh of a token still handed out).
        case refreshing
        /// The last token request failed: requests get its error until `retryAt`.
        case failing
        /// The server rejected freshly issued tokens: no new token is requested until `retryAt`.
        case rejected
        /// The token held has expired and no request has asked for a new one yet.
        case expired
    }

    public var credential: String
    public var root: String
    public var state: State
    /// Milliseconds since the epoch; nil when the token does not expire or there is none.
    public var expires: Int64?
    /// When the token held was issued (the last successful refresh).
    public var issued: Int64?
    /// Whether a usable token is held (in every state but `expired`, a token may still be handed out).
    public var hasValidToken: Bool
    public var lastError: String?
    /// When the next token request may go out (failing / rejected).
    public var retryAt: Int64?
}

extension TokenCache {
    /// One ``TokenStatus`` per key, sorted by credential and root.
    func status(now: Int64) -> [TokenStatus] {
        entries.keys.compactMap { status(key: $0, now: now) }
            .sorted { ($0.credential, $0.root) < ($1.credential, $1.root) }
    }

    /// The ``TokenStatus`` of `key`, nil when it has never been asked for.
    func status(key: String, now: Int64) -> TokenStatus? {
        guard let e = entries[key] else { return nil }
        do {
            let root = key.firstIndex(of: "|").map { String(key[key.index(after: $0)...]) } ?? ""
            let valid = e.token.map { !$0.isExpired(at: now) } ?? false
            var s = TokenStatus(
                credential: e.credential, root: root, state: .expired, expires: e.token?.expires,
                issued: e.token.map(\.issued), hasValidToken: valid, lastError: e.lastError?.message, retryAt: nil)
            if let r = rejections[key], r.backoff.isBackingOff(at: now) {
                s.state = .rejected
                s.retryAt = r.backoff.retryAt
            } else if e.inFlight {
                s.state = .refreshing
            } else if e.backoff.isBackingOff(at: now), e.lastError != nil {
                s.state = .failing
                s.retryAt = e.backoff.retryAt
            } else if valid {
                s.state = .valid
            } else if e.lastError != nil {
                // Backoff over, nobody asked again yet: still failing as far as anyone can tell.
                s.state = .failing
            }
            return s
        }
    }
}

extension TokenService {
    /// Every key's ``TokenStatus``.
    public func status() -> [TokenStatus] {
        let now = clock.nowMillis()
        return cache.withLock { $0.status(now: now) }
    }
}
