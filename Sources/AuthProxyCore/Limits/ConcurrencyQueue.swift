/// The decisions of one concurrency cap with its FIFO queue (``ConcurrencyLimit``): admit a request, queue it or
/// refuse it; on a release, which waiters get the freed slots in arrival order; which waiters timed out. Pure: the
/// caller passes the time (nanoseconds on a monotonic clock) and names each request by an id of its own.
///
/// `Retry-After` for a refused request estimates when a slot could be had: the average time a slot was held, times
/// the queue ahead of it per slot, between 1 s and the queue timeout.
struct ConcurrencyQueue: Sendable, Equatable {
    private(set) var limit: ConcurrencyLimit
    /// Slots taken now.
    private(set) var open = 0
    /// Waiters in arrival order from `head` on (the array is compacted when half of it is spent).
    private var waiters: [Waiter] = []
    private var head = 0
    /// Average nanoseconds a slot was held (exponentially weighted), 0 before the first release.
    private(set) var averageHold: Double = 0

    struct Waiter: Sendable, Equatable {
        var id: UInt64
        var deadline: UInt64
    }

    enum Admission: Sendable, Equatable {
        case granted
        /// Waits until a release grants it or `deadline` passes.
        case queued(deadline: UInt64)
        /// The queue is full (`max_queued`).
        case refused(retryAfterSeconds: Int)
    }

    /// What a release or a timeout check decided.
    struct Outcome: Sendable, Equatable {
        /// Waiters that now hold a slot, in arrival order.
        var granted: [UInt64] = []
        /// Waiters whose deadline passed: they leave the queue without a slot.
        var expired: [UInt64] = []
    }

    init(limit: ConcurrencyLimit) {
        self.limit = limit
    }

    var queued: Int { waiters.count - head }

    /// Asks for a slot for request `id`.
    mutating func admit(id: UInt64, now: UInt64) -> Admission {
        if open < limit.maxConcurrent, queued == 0 {
            open += 1
            return .granted
        }
        guard queued < limit.maxQueued else { return .refused(retryAfterSeconds: retryAfter(ahead: queued)) }
        let deadline = now &+ UInt64(limit.queueTimeoutSeconds) * 1_000_000_000
        waiters.append(Waiter(id: id, deadline: deadline))
        return .queued(deadline: deadline)
    }

    /// A slot held for `held` nanoseconds is given back; the first waiters still within their deadline take the
    /// free slots (those past it are reported expired).
    mutating func release(held: UInt64, now: UInt64) -> Outcome {
        precondition(open > 0, "a slot released that was not taken")
        open -= 1
        averageHold = averageHold == 0 ? Double(held) : averageHold * 0.8 + Double(held) * 0.2
        return grant(now: now)
    }

    /// Removes waiter `id` (its client left): true if it was waiting.
    mutating func cancel(id: UInt64) -> Bool {
        guard let i = waiters[head...].firstIndex(where: { $0.id == id }) else { return false }
        waiters.remove(at: i)
        return true
    }

    /// Removes the waiters whose deadline has passed.
    mutating func expire(now: UInt64) -> [UInt64] {
        var expired: [UInt64] = []
        var kept: [Waiter] = []
        for w in waiters[head...] {
            if w.deadline <= now { expired.append(w.id) } else { kept.append(w) }
        }
        guard !expired.isEmpty else { return [] }
        waiters = kept
        head = 0
        return expired
    }

    /// A reload changed the limit: a higher cap grants waiters at once; a lower one lets the open requests finish.
    mutating func update(_ new: ConcurrencyLimit, now: UInt64) -> Outcome {
        limit = new
        return grant(now: now)
    }

    /// `Retry-After` for a request refused now, or timed out.
    func retryAfter(ahead: Int) -> Int {
        let perSlot = Double(ahead + 1) / Double(max(1, limit.maxConcurrent))
        let estimate = Int((averageHold * perSlot / 1e9).rounded(.up))
        return min(max(1, limit.queueTimeoutSeconds), max(1, estimate))
    }

    /// Whether nothing is open or waiting (the entry may be forgotten).
    var isIdle: Bool { open == 0 && queued == 0 }

    private mutating func grant(now: UInt64) -> Outcome {
        var outcome = Outcome()
        while open < limit.maxConcurrent, head < waiters.count {
            let w = waiters[head]
            head += 1
            if w.deadline <= now {
                outcome.expired.append(w.id)
            } else {
                open += 1
                outcome.granted.append(w.id)
            }
        }
        if head > 32, head * 2 > waiters.count {
            waiters.removeFirst(head)
            head = 0
        }
        return outcome
    }
}
