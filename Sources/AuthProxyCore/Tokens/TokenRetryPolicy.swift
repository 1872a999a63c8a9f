/// What to do when the upstream rejects the token the proxy injected (498/499 in any form).
///
/// One refresh and one retry per request, never more; and a server that rejects even a freshly issued token
/// (a misconfigured referer, a revoked user, clock skew) is not asked for tokens again and again: the
/// credential backs off and clients get the upstream's rejection until the backoff allows a new attempt.
public enum TokenRetryPolicy {
    public struct Situation: Sendable, Equatable {
        /// 1 for the first try, 2 for the retry after a refresh.
        public var attempt: Int
        /// A pregenerated token (`token` credential): cannot be refreshed, the client is told to renew it.
        public var pregenerated: Bool
        /// The credential obtains tokens itself (arcgis-token, oauth-app, oauth-user, oauth2).
        public var refreshable: Bool
        /// The token was issued for this very request (it waited for the token request), so the server
        /// rejected a token it had never seen working.
        public var tokenIsFresh: Bool
        /// The credential is backing off after the server rejected fresh tokens.
        public var backingOff: Bool
        /// Why the request body cannot be sent again, if it cannot.
        public var replayImpossible: String?

        public init(
            attempt: Int, pregenerated: Bool = false, refreshable: Bool = true, tokenIsFresh: Bool = false,
            backingOff: Bool = false, replayImpossible: String? = nil
        ) {
            self.attempt = attempt
            self.pregenerated = pregenerated
            self.refreshable = refreshable
            self.tokenIsFresh = tokenIsFresh
            self.backingOff = backingOff
            self.replayImpossible = replayImpossible
        }
    }

    public enum Action: Sendable, Equatable {
        /// Forget the token, get a new one and send the request again.
        case refreshAndRetry
        /// The client gets the upstream's rejection as it is. `serverRejectsNewTokens`: the rejected token was
        /// fresh, so the credential must back off.
        case relay(reason: String, serverRejectsNewTokens: Bool)
        /// A pregenerated token was rejected: answer with a clear error (renew it).
        case explainPregenerated
        /// Answer the client with this error instead of the rejection (an API key credential whose every usable
        /// key the server rejected: ``APIKeySlotBook``).
        case answer(ErrorResponse)
    }

    public static func decide(_ s: Situation) -> Action {
        if s.pregenerated { return .explainPregenerated }
        guard s.refreshable else {
            return .relay(reason: "the credential cannot be refreshed", serverRejectsNewTokens: false)
        }
        if s.tokenIsFresh || s.attempt > 1 {
            return .relay(reason: "the server rejects new tokens", serverRejectsNewTokens: true)
        }
        if s.backingOff {
            return .relay(reason: "the server rejected new tokens recently; backing off", serverRejectsNewTokens: false)
        }
        if let why = s.replayImpossible { return .relay(reason: why, serverRejectsNewTokens: false) }
        return .refreshAndRetry
    }
}
