/// Every decision ``TokenService`` makes about the tokens it holds — which token a request gets, when a token
/// request starts and who waits for it, when a failing key may ask again — as a value with no I/O, no lock and
/// no clock of its own: each call takes `now` (milliseconds since the epoch) and answers with what to do, so
/// tests drive it step by step.
///
/// Per key (`credential|server root`, see ``TokenService/key(for:target:)``):
/// - **Single flight**: the first request that needs a token gets ``Lookup/startFetch(_:)``; the ones that
///   come while it runs wait, and ``complete(_:with:now:)`` hands all of them its one result.
/// - **Refresh margin**: a token inside its margin (``IssuedToken/needsRefresh(at:)``) is still handed out,
///   and ``refreshInBackground(key:credential:now:)`` says whether to start its refresh.
/// - **Failure backoff** (``TokenBackoff``): after a failed token request the key answers with the last error
///   at once (saying when the next attempt is) until the backoff ends, and asks for one probe then if a
///   request wanted a token meanwhile (``probeDue(key:now:)``).
/// - **Rejection backoff** (``TokenRetryPolicy``): a server that rejects a freshly issued token makes the key
///   back off; the rejected token is handed out meanwhile, so clients get the server's own answer.
/// - **Generations**: a credential whose sign-in changed (``grantChanged(credential:)``) starts a new
///   generation; a token request started before hands its result to the requests that waited for it, but
///   the cache does not keep it. A credential changed or removed by a configuration reload
///   (``forget(credential:)``) loses everything it had, the same way.
///
/// `Waiter` is what the caller needs to answer one request (a completion closure in ``TokenService``, plain
/// values in tests).
struct TokenCache<Waiter> {
    /// One token request the caller must run, then report with ``TokenCache/complete(_:with:now:)``.
    struct FetchTicket: Hashable, Sendable {
        let key: String
        let generation: Int
    }

    /// What to do for a request that needs a token. The cache keeps the waiter only for ``wait`` and
    /// ``startFetch(_:)``; for the other answers the caller answers the request itself.
    enum Lookup: Equatable, Sendable {
        /// Use this token.
        case ready(IssuedToken)
        /// Start a token request for this ticket; the waiter gets its result.
        case startFetch(FetchTicket)
        /// A token request is running: the waiter gets its result.
        case wait
        /// The key is backing off after a failed token request: answer with this error (its `retryAt` says
        /// until when). `probeAt`: schedule a probe for then (nil: one is scheduled already).
        case backingOff(TokenError, probeAt: Int64?)
        /// The server rejects newly issued tokens and there is no token to hand out: no token request until
        /// `retryAt`.
        case rejectingNewTokens(retryAt: Int64)
    }

    /// One waiting request's answer.
    struct Delivery {
        var waiter: Waiter
        var result: Result<IssuedToken, TokenError>
    }

    /// What became of a token request's result.
    enum Outcome: Equatable, Sendable {
        /// The token is cached (save it).
        case stored
        /// The request failed; the key waits `retryIn` milliseconds before the next one (0 for a local failure).
        case failed(retryIn: Int64)
        /// The request was started before the credential's sign-in changed (or is unknown): nothing is cached.
        case discarded
    }

    /// A finished token request: what the cache did with it, and who gets what.
    struct Settlement {
        var outcome: Outcome
        var deliveries: [Delivery]
    }

    /// What the upstream's rejection of a token means.
    struct RejectionOutcome: Equatable, Sendable {
        var action: TokenRetryPolicy.Action
        /// Set when this rejection started the key's rejection backoff: the wait, in milliseconds.
        var backoffStarted: Int64?
        /// Consecutive rejections of fresh tokens so far (when the server rejects new tokens).
        var consecutive = 0
    }

    /// A valid token and its key, for the state file.
    struct CachedToken: Equatable, Sendable {
        var key: String
        var credential: String
        var token: IssuedToken
    }

    struct Entry {
        var credential: String
        var token: IssuedToken?
        var generation = 0
        var inFlight = false
        var waiters: [Waiter] = []
        var backoff = TokenBackoff()
        var lastError: TokenError?
        /// A request wanted a token while the key was backing off: probe when the backoff ends.
        var wantedWhileBackingOff = false
        var probeScheduled = false
        /// The token was dropped after a rejection: the next one stored replaces a rejected token.
        var dropAfterRejection = false
        /// When the token held was stored, if it replaced a rejected one (see ``rejected(key:credential:token:attempt:pregenerated:refreshable:replayImpossible:now:)``).
        var replacedRejectedAt: Int64? = nil
    }

    /// A key whose server rejected a fresh token: its backoff, and the token last rejected.
    struct Rejection {
        var credential: String
        var backoff = TokenBackoff()
        var token: IssuedToken?
    }

    /// A credential whose own secret the token service refused (``TokenError/loginRefused``): its backoff, the
    /// refusal, and whether one probe is scheduled for the end of the backoff.
    struct LoginRefusal {
        var backoff = TokenBackoff()
        var error: TokenError
        var probeScheduled = false
    }

    private(set) var entries: [String: Entry] = [:]
    private(set) var rejections: [String: Rejection] = [:]
    /// By credential name: a refused password or client secret backs off the credential, not one root, so a
    /// request for another root (or many) makes no further failed login meanwhile (a login per root would lock the account).
    private(set) var loginRefusals: [String: LoginRefusal] = [:]
    /// Waiters of token requests started before their credential's sign-in changed.
    private var detached: [FetchTicket: [Waiter]] = [:]
    /// The last ticket number handed out: every token request gets its own, so a request started before its
    /// entry was forgotten can never be taken for the request of a new entry under the same key.
    private var lastTicket = 0

    init() {}

    // MARK: - handing out tokens

    /// The token of `key` usable at `now` without waiting, and whether it is due for refresh. Under
    /// ``RefreshMode/onDemand`` a token due for refresh is not handed out this way: the request asks
    /// ``acquire(key:credential:now:mode:waiter:)``, which waits for a new one.
    func cached(key: String, now: Int64, mode: RefreshMode = .ahead) -> (token: IssuedToken, refreshDue: Bool)? {
        guard let t = entries[key]?.token, !t.isExpired(at: now) else { return nil }
        let due = t.needsRefresh(at: now)
        if due, mode == .onDemand { return nil }
        return (t, due)
    }

    /// A request needs a token for `key` (under credential `credential`). `mode`: the credential's ``RefreshMode``;
    /// under `onDemand` a token inside its refresh margin is replaced now (the request waits), and a key backing
    /// off asks for no probe at the end of its backoff (the next request asks then).
    mutating func acquire(
        key: String, credential: String, now: Int64, mode: RefreshMode = .ahead, waiter: Waiter
    ) -> Lookup {
        lookup(key: key, credential: credential, now: now, refresh: false, onDemand: mode == .onDemand, waiter: waiter)
    }

    /// The token of `key` is inside its refresh margin: ``Lookup/startFetch(_:)`` when a refresh should start.
    /// Nobody waits for it.
    mutating func refreshInBackground(key: String, credential: String, now: Int64) -> Lookup {
        lookup(key: key, credential: credential, now: now, refresh: true, onDemand: false, waiter: nil)
    }

    /// The probe scheduled by ``Lookup/backingOff(_:probeAt:)`` is due: what to do, or nil when nobody
    /// wanted a token meanwhile (or one is there, or a request is running).
    mutating func probeDue(key: String, now: Int64) -> Lookup? {
        guard var e = entries[key] else { return nil }
        e.probeScheduled = false
        entries[key] = e
        loginRefusals[e.credential]?.probeScheduled = false
        guard e.wantedWhileBackingOff, !e.inFlight, e.token.map({ $0.isExpired(at: now) }) ?? true else { return nil }
        return lookup(key: key, credential: e.credential, now: now, refresh: false, onDemand: false, waiter: nil)
    }

    private mutating func lookup(
        key: String, credential: String, now: Int64, refresh: Bool, onDemand: Bool = false, waiter: Waiter?
    ) -> Lookup {
        var e = entries[key] ?? Entry(credential: credential)
        if let t = e.token, !t.isExpired(at: now), !((refresh || onDemand) && t.needsRefresh(at: now)) {
            return .ready(t)
        }
        if refresh, e.token != nil, e.inFlight { return .wait }  // the refresh is running already
        if let r = rejections[key], r.backoff.isBackingOff(at: now) {
            // The server rejected fresh tokens: no new one until the backoff allows it. The token it rejected
            // last goes out meanwhile (even if a refresh dropped it since), so clients get its answer.
            if let t = [e.token, r.token].compactMap({ $0 }).first(where: { !$0.isExpired(at: now) }) {
                return .ready(t)
            }
            return .rejectingNewTokens(retryAt: r.backoff.retryAt)
        }
        if e.inFlight {
            if let waiter { e.waiters.append(waiter) }
            entries[key] = e
            return .wait
        }
        if onDemand, let t = e.token, !t.isExpired(at: now),
            e.backoff.isBackingOff(at: now) || loginRefusals[credential]?.backoff.isBackingOff(at: now) == true
        {
            // Its refresh failed just now: the token due for refresh is still valid, and serves until the
            // backoff allows the next request to ask again.
            return .ready(t)
        }
        if e.backoff.isBackingOff(at: now), var error = e.lastError {
            // Backing off after a failure: answer at once instead of hammering the token service, say when
            // the next attempt is, and make sure one happens then (on demand: the next request after it asks).
            error.retryAt = e.backoff.retryAt
            var probeAt: Int64?
            if !onDemand {
                e.wantedWhileBackingOff = true
                if !e.probeScheduled {
                    e.probeScheduled = true
                    probeAt = e.backoff.retryAt
                }
            }
            entries[key] = e
            return .backingOff(error, probeAt: probeAt)
        }
        if var l = loginRefusals[credential] {
            // The token service refused this credential's secret: no other root may try it while the backoff
            // runs, nor while the one login after it is in flight (one failed login per backoff step, however
            // many roots are asked for). One probe per credential at the end of the backoff.
            let backingOff = l.backoff.isBackingOff(at: now)
            if backingOff
                || entries.contains(where: { $0.key != key && $0.value.credential == credential && $0.value.inFlight })
            {
                var error = l.error
                error.retryAt = backingOff ? l.backoff.retryAt : nil
                var probeAt: Int64?
                if backingOff, !l.probeScheduled, !refresh, !onDemand {
                    l.probeScheduled = true
                    probeAt = l.backoff.retryAt
                    e.wantedWhileBackingOff = true
                    e.probeScheduled = true
                    entries[key] = e
                    loginRefusals[credential] = l
                }
                return .backingOff(error, probeAt: probeAt)
            }
        }
        e.inFlight = true
        e.wantedWhileBackingOff = false
        if let waiter { e.waiters.append(waiter) }
        lastTicket += 1
        e.generation = lastTicket
        entries[key] = e
        return .startFetch(FetchTicket(key: key, generation: e.generation))
    }

    /// The token request of `ticket` finished with `result`.
    mutating func complete(_ ticket: FetchTicket, with result: Result<IssuedToken, TokenError>, now: Int64)
        -> Settlement
    {
        if let waiters = detached.removeValue(forKey: ticket) {
            // Started before the credential's sign-in changed: the requests that waited for it get its
            // result, but its token belongs to the old sign-in and must not be handed to anyone else.
            let answer = result.map { t in
                var t = t
                t.fresh = true
                return t
            }
            return Settlement(outcome: .discarded, deliveries: waiters.map { Delivery(waiter: $0, result: answer) })
        }
        guard var e = entries[ticket.key], e.inFlight, e.generation == ticket.generation else {
            return Settlement(outcome: .discarded, deliveries: [])
        }
        e.inFlight = false
        let waiters = e.waiters
        e.waiters = []
        switch result {
        case .success(var t):
            t.fresh = false
            e.token = t
            e.replacedRejectedAt = e.dropAfterRejection ? now : nil
            e.dropAfterRejection = false
            e.backoff.succeeded()
            e.lastError = nil
            entries[ticket.key] = e
            loginRefusals[e.credential] = nil  // the secret works
            t.fresh = true  // these requests waited for it: the upstream has never seen it
            return Settlement(outcome: .stored, deliveries: waiters.map { Delivery(waiter: $0, result: .success(t)) })
        case .failure(var error):
            let wait = error.local ? 0 : e.backoff.failed(at: now, retryAfter: error.retryAfter)
            e.lastError = error
            if error.loginRefused {
                var l = loginRefusals[e.credential] ?? LoginRefusal(error: error)
                // Roots that shared one refusal (a federated server waiting for its portal's login) count once.
                if !l.backoff.isBackingOff(at: now) {
                    l.backoff.failed(at: now)
                    l.probeScheduled = false
                }
                l.error = error
                loginRefusals[e.credential] = l
            }
            // A token that is only due for refresh stays usable until it really expires.
            if let t = e.token, t.isExpired(at: now) { e.token = nil }
            entries[ticket.key] = e
            let answer: Result<IssuedToken, TokenError>
            if let t = e.token {
                answer = .success(t)
            } else {
                if e.backoff.isBackingOff(at: now) { error.retryAt = e.backoff.retryAt }
                answer = .failure(error)
            }
            return Settlement(
                outcome: .failed(retryIn: wait), deliveries: waiters.map { Delivery(waiter: $0, result: answer) })
        }
    }

    // MARK: - rejections and invalidation

    /// The upstream rejected `token` (498/499 in any form) on `attempt` of a request to `key`: decides with
    /// ``TokenRetryPolicy`` whether to refresh and retry, and records what that means — the token is
    /// forgotten before a refresh; a fresh token rejected makes the key back off (the token is kept, so
    /// clients keep getting the upstream's own answer while no new token may be requested).
    mutating func rejected(
        key: String, credential: String, token: IssuedToken, attempt: Int, pregenerated: Bool,
        refreshable: Bool, replayImpossible: String?, now: Int64
    ) -> RejectionOutcome {
        let backingOff = rejections[key]?.backoff.isBackingOff(at: now) ?? false
        // A request that took the key's token from the cache (not marked fresh) is as much a rejection of a new
        // token when that token was fetched moments ago to replace a rejected one: otherwise a request arriving
        // just after the refresh would start yet another token request (seen with 50 concurrent clients).
        var fresh = token.fresh
        if !fresh, let e = entries[key], e.token?.value == token.value, let at = e.replacedRejectedAt,
            now - at < Self.freshAfterRejectionMillis
        {
            fresh = true
        }
        let action = TokenRetryPolicy.decide(
            .init(
                attempt: attempt, pregenerated: pregenerated,
                refreshable: refreshable, tokenIsFresh: fresh, backingOff: backingOff,
                replayImpossible: replayImpossible))
        var outcome = RejectionOutcome(action: action)
        switch action {
        case .relay(_, serverRejectsNewTokens: true):
            var r = rejections[key] ?? Rejection(credential: credential)
            // Requests that shared one fresh token report it together: one failure, not one per request.
            if !r.backoff.isBackingOff(at: now) { outcome.backoffStarted = r.backoff.failed(at: now) }
            outcome.consecutive = r.backoff.failures
            var unfresh = token
            unfresh.fresh = false
            r.token = unfresh
            rejections[key] = r
        case .relay(_, serverRejectsNewTokens: false) where backingOff:
            break  // keep the token: no new one may be requested yet
        default:
            invalidate(credential: credential, value: token.value)
        }
        return outcome
    }

    /// How long a token fetched to replace a rejected one counts as fresh for any request that carried it,
    /// unless the server accepts it first (``accepted(key:value:now:)``).
    static var freshAfterRejectionMillis: Int64 { 10_000 }

    /// A response to a request to `key` that carried the token `value` was no token error: the server accepts
    /// it. A later rejection of that token is an ordinary expiry or revocation (refresh and retry), not a sign
    /// that the server rejects new tokens; and when it is the key's current token or the one whose rejection
    /// started the key's rejection backoff, that backoff is over. (A late answer to an older token proves
    /// nothing about new ones.)
    /// Whether any answer could change something through ``accepted(key:value:now:)``: a replacement token not yet
    /// proven, or a rejection backoff. Nearly always false, so the request path skips the rest.
    var awaitsAcceptance: Bool {
        !rejections.isEmpty || entries.values.contains { $0.replacedRejectedAt != nil }
    }

    ///
    /// One exception keeps the backoff: fresh tokens rejected again and again, each accepted elsewhere in
    /// between. Then the server accepts the credential's tokens and one service refuses them (no permission
    /// given in a form that looks like a token error, a service of another server behind the same root): a
    /// new token changes nothing for it, and ending the backoff at every acceptance made each of its requests
    /// fetch one (a password login per request). The backoff runs its course (1 s doubling to 30 s) while the
    /// accepted token keeps serving every other request and that service's rejections are relayed.
    mutating func accepted(key: String, value: String, now: Int64) {
        let current = entries[key]?.token?.value == value
        if current, entries[key]?.replacedRejectedAt != nil { entries[key]?.replacedRejectedAt = nil }
        guard var r = rejections[key], current || r.token?.value == value else { return }
        if now - r.backoff.lastFailureAt > TokenBackoff.forgetAfter {
            rejections[key] = nil
        } else if r.backoff.failures < Self.selectiveRejectionAfter {
            // The failures still count, so a repetition is recognised; the record goes once they are forgotten.
            r.backoff.endWait()
            rejections[key] = r
        }
    }

    /// How many rejections of fresh tokens in a row (within ``TokenBackoff/forgetAfter``), each followed by an
    /// acceptance, mean that the server accepts tokens and a service refuses them.
    static var selectiveRejectionAfter: Int { 2 }

    /// The rejection backoff of `key`, if its server ever rejected a fresh token.
    func rejectionBackoff(key: String) -> TokenBackoff? { rejections[key]?.backoff }

    /// Forgets the token `value` of `credential` under every key that still holds it (a portal token used as
    /// is for a non-federated server is cached under both keys); a key whose token was replaced meanwhile
    /// keeps its new one. Returns whether any key held it.
    @discardableResult
    mutating func invalidate(credential: String, value: String) -> Bool {
        var changed = false
        for (k, e) in entries where e.credential == credential && e.token?.value == value {
            entries[k]?.token = nil
            entries[k]?.dropAfterRejection = true
            entries[k]?.replacedRejectedAt = nil
            changed = true
        }
        return changed
    }

    /// The credential's sign-in changed (signed out, or in again, perhaps as another user): its tokens belong
    /// to the old grant. They are forgotten, and token requests running for it are detached: their waiters
    /// still get their results, but new requests start a request of their own and nothing old is cached.
    mutating func grantChanged(credential: String) {
        loginRefusals[credential] = nil  // a new sign-in: its refresh token has not been refused
        for (k, var e) in entries where e.credential == credential {
            e.token = nil
            if e.inFlight {
                detached[FetchTicket(key: k, generation: e.generation)] = e.waiters
                e.waiters = []
                e.inFlight = false
            }
            e.generation += 1
            entries[k] = e
        }
    }

    /// A configuration reload changed or removed `credential`: its tokens, failure and rejection backoffs go,
    /// and token requests running for it are detached (the requests that waited for one began under the old
    /// configuration and still get its result; nothing is kept). The next request under the new settings
    /// starts from nothing.
    mutating func forget(credential: String) {
        for (k, e) in entries where e.credential == credential {
            if e.inFlight {
                detached[FetchTicket(key: k, generation: e.generation), default: []] += e.waiters
            }
            entries[k] = nil
        }
        for (k, r) in rejections where r.credential == credential { rejections[k] = nil }
        loginRefusals[credential] = nil
    }

    /// Whether anything is held for `credential` (tests).
    func holds(credential: String) -> Bool {
        entries.values.contains { $0.credential == credential }
            || rejections.values.contains { $0.credential == credential }
            || loginRefusals[credential] != nil
    }

    // MARK: - the state file

    /// A token saved by this or another process for `key`, taken only when the key has never been used here
    /// (a token this process dropped — rejected upstream, old grant — may still be in the file). Returns
    /// whether it was taken. A saved token no token service could have handed out now (``TokenSyntax``: one
    /// saved by a build that did not check, or a file edited by hand) is left in the file, not taken.
    @discardableResult
    mutating func adopt(key: String, credential: String, token: IssuedToken) -> Bool {
        guard entries[key] == nil, TokenSyntax.arcgisProblem(token.value) == nil else { return false }
        entries[key] = Entry(credential: credential, token: token)
        return true
    }

    /// The tokens still valid at `now`, to save.
    func validTokens(now: Int64) -> [CachedToken] {
        entries.compactMap { k, e in
            guard let t = e.token, !t.isExpired(at: now) else { return nil }
            return CachedToken(key: k, credential: e.credential, token: t)
        }
    }
}

extension TokenCache.Delivery: Sendable where Waiter: Sendable {}
extension TokenCache.Settlement: Sendable where Waiter: Sendable {}
