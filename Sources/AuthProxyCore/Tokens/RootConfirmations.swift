/// Which server and portal roots a refreshable credential may spend its password or client secret on.
///
/// A root is read from the request path (``ServerRoot``), so without a check every `/arcgis/<anything>/rest/…` a
/// client invents under a match prefix would be a root of its own: a token request (a password login) per
/// invented path, a failed login per path when the password is refused (account lockout), a cache entry, a
/// metrics series and a status line per path. A root is therefore **confirmed** before any
/// token is requested for it:
/// - **configured**: the root of one of the credential's `match` prefixes, of its `token_url` or its portal
///   (``TokenService/configuredRootKeys(_:)``) — no probe, never refused, not counted against the cap;
/// - **probed**: its `rest/info` (a portal's `sharing/rest/info`) answers as an ArcGIS root
///   (``ServerInfoResponse/describesRoot``).
///
/// The rest is bounded per credential:
/// - **Probe budget**: at most ``Limits/probeBurst`` probes at once, then one more every
///   ``Limits/probeRefill`` milliseconds (10, then 10 a minute), so invented roots cannot turn the proxy into a
///   scanner of the upstream; a root that would need a probe beyond the budget is refused for now.
/// - **Negative answers are remembered** (``Limits/maxRefused`` roots per credential): a root whose `rest/info`
///   answered but not as an ArcGIS root for ``Limits/refusedLifetime`` (10 min), one that did not answer (down,
///   timeout: perhaps transient) for ``Limits/unreachableLifetime`` (30 s). The oldest goes when full.
/// - **Cap**: at most ``Limits/maxRoots`` (64) probed roots per credential. A root beyond it is refused with an
///   error naming the cap rather than evicting a confirmed root: an evicted root's next request would log in
///   again, so a server that confirms many roots (or many real ones in rotation) could still make a login per
///   request — the amplification this type exists to stop. Configured roots are never refused, so a deployment
///   with more real roots lists them as match prefixes.
///
/// Single flight: while a root is probed, other requests for it wait for the verdict. A value type with no I/O
/// and no clock: each call takes `now` (milliseconds since the epoch). `Waiter` is what the caller needs to
/// answer a request (a completion closure in ``TokenService``, plain values in tests).
struct RootConfirmations<Waiter> {
    struct Limits: Sendable, Equatable {
        var maxRoots = 64
        var maxRefused = 128
        var refusedLifetime: Int64 = 10 * 60 * 1000
        var unreachableLifetime: Int64 = 30 * 1000
        var probeBurst = 10
        var probeRefill: Int64 = 6_000
    }

    /// What a probe of a root found.
    enum Verdict: Equatable, Sendable {
        /// `rest/info` answered as an ArcGIS server (or portal) root.
        case root
        /// It answered, but not as an ArcGIS root (404, an error object, an HTML page): `reason` says how.
        case notARoot(reason: String)
        /// No answer (connection refused, timeout, TLS failure): perhaps transient, remembered briefly.
        case unreachable(reason: String)
    }

    /// Why a root is refused: no token is requested for it.
    enum Refusal: Equatable, Sendable {
        /// A probe found no ArcGIS root there (or no answer); asked again after `retryAt`.
        case notARoot(reason: String, retryAt: Int64)
        /// The credential's probe budget is spent; a probe is possible again at `retryAt`.
        case probeBudget(retryAt: Int64)
        /// The credential already has `limit` probed roots.
        case tooManyRoots(limit: Int)
    }

    enum Decision: Equatable, Sendable {
        /// Go on: request a token for the root.
        case confirmed
        /// Probe the root, then report with ``settle(credential:key:verdict:now:)``; the waiter waits for it.
        case probe
        /// A probe of this root is running: the waiter gets its verdict.
        case wait
        /// No token for this root; the caller answers the request.
        case refused(Refusal)
    }

    /// A finished probe: whether its waiters may go on, and who they are.
    struct Settlement {
        var decision: Decision
        var waiters: [Waiter]
    }

    private struct Refused {
        var reason: String
        var until: Int64
    }

    private struct PerCredential {
        var confirmed: Set<String> = []
        var refused: [String: Refused] = [:]
        var probing: [String: [Waiter]] = [:]
        var probesLeft: Int
        var refilledAt: Int64
    }

    let limits: Limits
    private var credentials: [String: PerCredential] = [:]

    init(limits: Limits = Limits()) {
        self.limits = limits
    }

    /// Whether `key` (a ``TokenService/key(_:root:isPortal:)``) of `credential` may have a token; `configured`:
    /// the key is one of the credential's configured roots.
    mutating func check(credential: String, key: String, configured: Bool, now: Int64, waiter: Waiter) -> Decision {
        if configured { return .confirmed }
        var s = credentials[credential] ?? PerCredential(probesLeft: limits.probeBurst, refilledAt: now)
        defer { credentials[credential] = s }
        if s.confirmed.contains(key) { return .confirmed }
        if s.probing[key] != nil {
            s.probing[key]!.append(waiter)
            return .wait
        }
        if let r = s.refused[key] {
            if now < r.until { return .refused(.notARoot(reason: r.reason, retryAt: r.until)) }
            s.refused[key] = nil
        }
        if s.confirmed.count + s.probing.count >= limits.maxRoots {
            return .refused(.tooManyRoots(limit: limits.maxRoots))
        }
        refill(&s, now: now)
        guard s.probesLeft > 0 else { return .refused(.probeBudget(retryAt: s.refilledAt + limits.probeRefill)) }
        s.probesLeft -= 1
        s.probing[key] = [waiter]
        return .probe
    }

    /// The probe of `key` found `verdict`: remembers it and answers everyone who waited for it.
    mutating func settle(credential: String, key: String, verdict: Verdict, now: Int64) -> Settlement {
        guard var s = credentials[credential], let waiters = s.probing.removeValue(forKey: key) else {
            // Nobody waits for this probe (cannot happen: ``forget(credential:)`` keeps running probes).
            return Settlement(
                decision: .refused(.notARoot(reason: "the credential changed", retryAt: now)), waiters: [])
        }
        defer { credentials[credential] = s }
        switch verdict {
        case .root:
            guard s.confirmed.count < limits.maxRoots else {
                return Settlement(decision: .refused(.tooManyRoots(limit: limits.maxRoots)), waiters: waiters)
            }
            s.confirmed.insert(key)
            return Settlement(decision: .confirmed, waiters: waiters)
        case .notARoot(let reason):
            let until = now + limits.refusedLifetime
            remember(&s, key: key, Refused(reason: reason, until: until), now: now)
            return Settlement(decision: .refused(.notARoot(reason: reason, retryAt: until)), waiters: waiters)
        case .unreachable(let reason):
            let until = now + limits.unreachableLifetime
            remember(&s, key: key, Refused(reason: reason, until: until), now: now)
            return Settlement(decision: .refused(.notARoot(reason: reason, retryAt: until)), waiters: waiters)
        }
    }

    /// A reload changed or removed `credential`: what it had confirmed or refused no longer applies (its match
    /// prefixes may have changed). Probes still running are kept, so the requests waiting for them get their
    /// verdict instead of hanging.
    mutating func forget(credential: String) {
        guard let old = credentials[credential] else { return }
        if old.probing.isEmpty {
            credentials[credential] = nil
        } else {
            var s = PerCredential(probesLeft: old.probesLeft, refilledAt: old.refilledAt)
            s.probing = old.probing
            credentials[credential] = s
        }
    }

    /// Whether anything is held for `credential` (tests).
    func holds(credential: String) -> Bool { credentials[credential] != nil }

    /// The probed roots of `credential` (tests, status).
    func confirmedCount(credential: String) -> Int { credentials[credential]?.confirmed.count ?? 0 }

    /// The remembered refusals of `credential` (tests).
    func refusedCount(credential: String) -> Int { credentials[credential]?.refused.count ?? 0 }

    private func refill(_ s: inout PerCredential, now: Int64) {
        guard s.probesLeft < limits.probeBurst else {
            s.refilledAt = now
            return
        }
        let gained = Int((now - s.refilledAt) / limits.probeRefill)
        guard gained > 0 else { return }
        s.probesLeft = min(limits.probeBurst, s.probesLeft + gained)
        s.refilledAt = s.probesLeft == limits.probeBurst ? now : s.refilledAt + Int64(gained) * limits.probeRefill
    }

    private func remember(_ s: inout PerCredential, key: String, _ r: Refused, now: Int64) {
        if s.refused.count >= limits.maxRefused {
            s.refused = s.refused.filter { now < $0.value.until }
        }
        if s.refused.count >= limits.maxRefused, let oldest = s.refused.min(by: { $0.value.until < $1.value.until }) {
            s.refused[oldest.key] = nil
        }
        s.refused[key] = r
    }
}

extension RootConfirmations.Settlement: Sendable where Waiter: Sendable {}
