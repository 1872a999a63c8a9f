import Dispatch

/// Where ``TokenService`` keeps tokens beyond its memory: what it saves for a restart, what other processes
/// (`authproxy login`, `signout`, other replicas) change, and — for a fleet — who fetches a token and who waits.
///
/// Two implementations:
/// - ``FileTokenStore``: the encrypted state file of one process. Every token request is this process's own
///   (``TokenCache`` already makes it one per key in the process).
/// - ``ClusterTokenStore``: a Redis shared by the replicas of a fleet, with the state file as the local fallback
///   when Redis cannot be reached.
///
/// Ownership: every method is called on the token service's queue (the store may block it for at most its own
/// short operation timeout), and every completion runs there too.
protocol TokenStore: AnyObject {
    /// Where the state file is, for log lines.
    var location: String { get }

    /// Reads what was saved (expired entries left out). A damaged state file is renamed aside and reported in
    /// ``TokenStoreLoad/quarantined``; a wrong `state_key` or an unreadable file throws.
    func load() throws(StateError) -> TokenStoreLoad

    /// What another process changed since this process last read or wrote: nil when nothing did.
    func changes() -> Result<TokenStateFile.Contents, StateError>?

    /// Read-modify-write of the saved state under the writers' lock (see ``TokenStateFile/update(_:)``).
    func update(_ body: (inout TokenStateFile.Contents) throws(StateError) -> Void) throws(StateError)
        -> TokenStateFile.UpdateResult

    /// A token request is about to start for `slot`: asks the store whether another process has a token to use
    /// instead, or is fetching one to wait for. `holding` is the token this process holds for the slot (inside its
    /// refresh margin), `rejected` the value it last saw rejected: neither counts as a new token.
    func claim(_ slot: TokenSlot, holding: IssuedToken?, rejected: String?, done: @escaping (TokenClaim) -> Void)

    /// The token request that ``claim(_:holding:rejected:done:)`` allowed produced `token`: share it.
    func publish(_ slot: TokenSlot, token: IssuedToken, lease: TokenLease?)

    /// The token request that ``claim(_:holding:rejected:done:)`` allowed failed: let the others try.
    func abandon(_ slot: TokenSlot, lease: TokenLease)

    /// An upstream rejected `token` (or a portal refused it as dead): nobody may hand it out again. A newer
    /// token in the store is kept.
    func withdraw(_ slot: TokenSlot, token: IssuedToken)

    /// The refresh token of an `oauth-user` credential as the store has it now; nil: the store does not know
    /// (the state file's copy, which ``TokenService`` holds, is then the one).
    func sharedRefreshToken(credential: String, fingerprint: String) -> TokenStateFile.StoredRefreshToken??

    /// A provider rotated a refresh token (``TokenService/keepRefreshToken(_:_:)``): the other processes must spend
    /// the new one, never the old (reuse detection revokes the whole grant). The state file has it already.
    func shareRefreshToken(_ stored: TokenStateFile.StoredRefreshToken)

    /// The refresh token `current` is due for its exchange (``SignInRenewal``): whether this process may exchange it
    /// (holding the fleet's lock for the sign-in when there is one), or the store has moved on — another replica
    /// exchanged it, or the sign-in was replaced or removed — or another replica is exchanging it now. The fencing of
    /// ``claim(_:holding:rejected:done:)``, for the one refresh token a sign-in has: exchanged once, never twice.
    func claimExchange(_ current: TokenStateFile.StoredRefreshToken, done: @escaping (ExchangeClaim) -> Void)

    /// The exchange that ``claimExchange(_:done:)`` allowed produced `exchanged`: it replaces `current` in the store,
    /// only if the store still holds `current` (compare-and-set), and the lock is released. true: written; false: the
    /// store holds another refresh token now (its own is the one to use); nil: the store cannot tell (no fleet, or
    /// Redis cannot be used).
    func finishExchange(
        _ current: TokenStateFile.StoredRefreshToken, exchanged: TokenStateFile.StoredRefreshToken,
        lease: TokenLease?
    ) -> Bool?

    /// The exchange that ``claimExchange(_:done:)`` allowed failed: the lock is released for the next try.
    func abandonExchange(_ current: TokenStateFile.StoredRefreshToken, lease: TokenLease)

    /// Who to tell about another process's changes that arrive on their own (a fleet's notices).
    var observer: (any TokenStoreObserver)? { get set }
}

/// The answer to ``TokenStore/claimExchange(_:done:)``.
enum ExchangeClaim: Sendable, Equatable {
    /// Exchange it. `lease` when this process holds the fleet's lock for the sign-in: finish with it.
    case exchange(TokenLease?)
    /// The store holds another refresh token for the credential now (nil: none — signed out): take that one, exchange
    /// nothing.
    case superseded(TokenStateFile.StoredRefreshToken?)
    /// Another replica is exchanging it now: look again shortly.
    case busy
}

/// What ``TokenService`` learns from a store between its own calls.
protocol TokenStoreObserver: AnyObject {
    /// The queue the store's calls and completions run on (the token service's).
    var queue: DispatchQueue { get }
    /// Another replica withdrew the token of `slot` that `matches` (an upstream rejected it): drop it here too.
    func sharedTokenWithdrawn(_ slot: TokenSlot, matches: (IssuedToken) -> Bool)
    /// A credential's sign-in changed elsewhere (`login`, `signout`).
    func sharedSignInChanged()
    /// The token this process holds for `slot`, if any (checked against the fleet's withdrawals on reconnect).
    func heldToken(_ slot: TokenSlot) -> IssuedToken?
}

/// What ``TokenStore/load()`` found.
struct TokenStoreLoad {
    var contents: TokenStateFile.Contents
    /// Where a damaged state file was moved to, if one was.
    var quarantined: String?
    var damage: StateError?
}

/// One token a fleet can share: the cache key in this process, and what names it across processes — the
/// credential's settings fingerprint and the server root (never the credential's name alone: a credential
/// changed on one replica must not get another's token).
struct TokenSlot: Hashable, Sendable {
    /// `credential|server root` (``TokenService/key(_:root:isPortal:)``).
    var key: String
    var credential: String
    /// SHA-256 of the credential's ``Credential/identityMaterial``.
    var fingerprint: String
    /// For `oauth-user`: the sign-in its tokens come from (``TokenStateFile/StoredRefreshToken/signIn``), so a token
    /// of an earlier sign-in is never taken for one of the current sign-in, and an exchanged refresh token keeps the
    /// tokens of its sign-in.
    var grant: String?

    /// The part of the key after the credential's name: the server root (and `/sharing/rest` for a portal).
    var root: String {
        key.firstIndex(of: "|").map { String(key[key.index(after: $0)...]) } ?? key
    }
}

/// The answer to ``TokenStore/claim(_:holding:rejected:done:)``.
enum TokenClaim: Sendable, Equatable {
    /// Another replica's token: use it, no token request.
    case shared(IssuedToken)
    /// Make the token request. `lease` when this process holds the fleet's lock for the slot: publish with it.
    case fetch(TokenLease?)
}

/// Proof of holding a fleet's lock for one slot: the random value the lock was set to.
struct TokenLease: Sendable, Equatable, Hashable {
    var value: String
}
