/// One replica's view of a ``FleetLimit``: the permits it leased from the fleet's count in Redis for the current
/// window, and, while Redis cannot be used, its own share. Pure: the caller passes the time (milliseconds on the
/// wall clock) and whether Redis may be asked now; tests drive it with values.
///
/// - **Shared**: a request spends a leased permit, without Redis. With none left it asks for a lease
///   (``Step/lease``) — unless Redis said the window is used up, then it is refused until the window ends.
/// - **Fallback** (Redis cannot be used): permits still held serve first (Redis counted them); then the replica
///   allows its share of the window: what the fleet had left when it last looked, divided by the replicas, for the
///   window it knew; the limit divided by the replicas for later windows. Those requests are reported to Redis
///   with the next lease, so a window that Redis comes back in counts them.
struct FleetWindow: Sendable, Equatable {
    let limit: FleetLimit

    /// A window: its index (seconds since the epoch ÷ the window's length, on Redis's clock) and when it ends on
    /// this replica's clock.
    struct Span: Sendable, Equatable {
        var index: Int64
        var endsAt: Int64
    }

    /// The window of the last lease.
    private(set) var shared: Span? = nil
    /// Leased and not spent yet (void once ``shared`` ends).
    private(set) var permits = 0
    /// Redis had no more to lease in ``shared``.
    private(set) var exhausted = false
    /// The fleet's count for ``shared`` after the last lease.
    private(set) var fleetUsed = 0
    /// The window the fallback allowance is for, what is left of it, and what was allowed from it (to report).
    private(set) var fallbackSpan: Span? = nil
    private(set) var fallbackLeft = 0
    private(set) var fallbackSpent = 0
    /// When a request last spent a leased permit, and when the last lease was asked for.
    private(set) var lastSpent: Int64 = 0
    private(set) var leasedAt: Int64 = 0

    init(limit: FleetLimit) { self.limit = limit }

    enum Step: Sendable, Equatable {
        case allowed
        /// `share`: this replica's share of the window when the refusal comes from the fallback, nil when the
        /// fleet's window is used up.
        case limited(retryAfterSeconds: Int, share: Int?)
        /// No permit here: ask Redis for a lease (``leaseRequest(waiting:replicas:)``).
        case lease
    }

    mutating func take(now: Int64, redisUsable: Bool, replicas: Int) -> Step {
        if let s = shared, now < s.endsAt {
            if permits > 0 {
                permits -= 1
                lastSpent = now
                return .allowed
            }
            if redisUsable {
                return exhausted
                    ? .limited(retryAfterSeconds: Self.seconds(until: s.endsAt, now: now), share: nil) : .lease
            }
        } else if redisUsable {
            return .lease
        }
        return fallbackTake(now: now, replicas: replicas)
    }

    private mutating func fallbackTake(now: Int64, replicas: Int) -> Step {
        let span = span(at: now)
        if fallbackSpan != span {
            fallbackSpan = span
            fallbackSpent = 0
            fallbackLeft =
                shared?.index == span.index
                ? limit.share(replicas: replicas, afterFleetUsed: fleetUsed) : limit.share(replicas: replicas)
        }
        guard fallbackLeft > 0 else {
            return .limited(
                retryAfterSeconds: Self.seconds(until: span.endsAt, now: now), share: limit.share(replicas: replicas))
        }
        fallbackLeft -= 1
        fallbackSpent += 1
        return .allowed
    }

    /// The window at `now`: the fleet's windows follow each other from the last one Redis named; before any, they
    /// are aligned on this replica's clock.
    func span(at now: Int64) -> Span {
        let w = limit.windowMillis
        if let s = shared {
            if now < s.endsAt { return s }
            let k = (now - s.endsAt) / w + 1
            return Span(index: s.index + k, endsAt: s.endsAt + k * w)
        }
        let i = max(0, now) / w
        return Span(index: i, endsAt: (i + 1) * w)
    }

    /// What to ask Redis for.
    struct LeaseRequest: Sendable, Equatable {
        /// Permits wanted: a batch, or as many as requests wait when more do.
        var want: Int
        /// Requests allowed in fallback in window `carryWindow`: Redis adds them to that window's count if it is
        /// still the current one (else they belong to a window that is over).
        var carry: Int
        var carryWindow: Int64
    }

    func leaseRequest(waiting: Int, replicas: Int) -> LeaseRequest {
        LeaseRequest(
            want: max(limit.batch(replicas: replicas), waiting), carry: fallbackSpent,
            carryWindow: fallbackSpan?.index ?? -1)
    }

    /// Redis's answer to a lease.
    struct LeaseResult: Sendable, Equatable {
        var granted: Int
        /// The fleet's count of the window after the lease (the carry and the grant included).
        var used: Int
        var window: Int64
        /// Milliseconds from Redis's clock to the end of the window.
        var millisLeft: Int64

        /// From the script's reply `{granted, used, window, millis left}`.
        init?(_ reply: RedisReply) {
            guard case .array(let a) = reply, a.count == 4, case .integer(let g) = a[0], case .integer(let u) = a[1],
                case .integer(let w) = a[2], case .integer(let m) = a[3], g >= 0
            else { return nil }
            self.init(granted: Int(g), used: Int(u), window: w, millisLeft: m)
        }

        init(granted: Int, used: Int, window: Int64, millisLeft: Int64) {
            self.granted = granted
            self.used = used
            self.window = window
            self.millisLeft = millisLeft
        }
    }

    /// The lease sent at `sentAt` (this replica's clock) came back. The window is taken to end `millisLeft` after
    /// the request was sent, never later than it really does on this clock: permits are not spent past their
    /// window.
    mutating func leased(_ r: LeaseResult, sentAt: Int64, carried: Int) {
        if shared?.index != r.window { permits = 0 }
        shared = Span(index: r.window, endsAt: sentAt + max(0, r.millisLeft))
        leasedAt = sentAt
        permits += r.granted
        fleetUsed = r.used
        exhausted = r.used >= limit.requests
        // Counted by Redis now (or dropped with a window that is over).
        fallbackSpent = max(0, fallbackSpent - carried)
        fallbackSpan = nil
        fallbackLeft = 0
    }

    /// Permits held and not spent for `idleMillis` go back to the fleet (the others may need them before the window
    /// ends): how many, and the window they belong to; nil when there are none to give back. They are dropped here
    /// at once (a request arriving meanwhile leases again), so a give-back that fails loses them, never doubles them.
    mutating func releaseIdle(now: Int64, idleMillis: Int64) -> (count: Int, window: Int64)? {
        guard permits > 0, let s = shared, now < s.endsAt, now - max(lastSpent, leasedAt) >= idleMillis else {
            return nil
        }
        let n = permits
        permits = 0
        fleetUsed = max(0, fleetUsed - n)
        exhausted = false
        return (n, s.index)
    }

    /// Whether permits are held that ``releaseIdle(now:idleMillis:)`` may give back later.
    var holdsPermits: Bool { permits > 0 }

    /// Requests counted in the current window as far as this replica knows: the fleet's count at the last lease
    /// (when that window is current), plus what it allowed on its own since.
    func used(now: Int64) -> Int {
        let span = span(at: now)
        let fleet = shared?.index == span.index ? fleetUsed : 0
        return fleet + (fallbackSpan == span ? fallbackSpent : 0)
    }

    static func seconds(until end: Int64, now: Int64) -> Int { Int(max(1, (end - now + 999) / 1000)) }
}
