import Dispatch
import Synchronization

/// The concurrency caps of the process (`max_concurrent` of `[[upstream]]` hosts and of credentials), shared by all
/// event loops and kept across reloads (``SharedServerState``). Each cap is a ``ConcurrencyQueue``; this type holds
/// them under one lock with the waiters' callbacks, and hands out slots as objects (``UpstreamSlot``) that give
/// themselves back when dropped, so an exchange that ends or a connection that closes by any path frees its slot.
///
/// A waiter is told of its slot through its callback, called outside the lock (it hops to its connection's queue);
/// a waiter whose deadline passed when a slot came free is told it timed out the same way.
final class UpstreamLimiter: Sendable {
    enum Scope: String, Sendable, CaseIterable {
        case host
        case credential
    }

    struct Key: Hashable, Sendable {
        var scope: Scope
        /// The `[[upstream]]` label (host or host:port) or the credential's name.
        var name: String
    }

    enum Grant: Sendable {
        case granted(UpstreamSlot)
        case timedOut(retryAfterSeconds: Int)
    }

    enum Acquisition: Sendable {
        case granted(UpstreamSlot)
        /// Waits; dropping the ``QueuedWait`` leaves the queue.
        case queued(QueuedWait, deadline: UInt64)
        case refused(retryAfterSeconds: Int)
    }

    enum RefusalReason: String, Sendable, CaseIterable {
        /// `max_queued` waiters already.
        case queueFull = "queue_full"
        /// Waited `queue_timeout_seconds`.
        case queueTimeout = "queue_timeout"
    }

    struct Snapshot: Sendable, Equatable {
        var key: Key
        var limit: ConcurrencyLimit
        var open: Int
        var queued: Int
        var refused: [RefusalReason: UInt64]
    }

    private struct Entry {
        var queue: ConcurrencyQueue
        var callbacks: [UInt64: @Sendable (Grant) -> Void] = [:]
        var refused: [RefusalReason: UInt64] = [:]
        /// Still configured (an entry no longer configured is forgotten once idle).
        var configured = true
    }

    private let entries = Mutex<[Key: Entry]>([:])
    private let nextID = Atomic<UInt64>(1)

    init() {}

    static func uptime() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

    /// A configuration generation's caps: new ones start at 0, changed ones take the new limit (a higher cap grants
    /// waiters at once), removed ones stop being shown once nothing is open or waiting on them.
    func configure(_ limits: [Key: ConcurrencyLimit]) {
        let now = Self.uptime()
        var grants: [(Key, UInt64, @Sendable (Grant) -> Void)] = []
        var timeouts: [(Int, @Sendable (Grant) -> Void)] = []
        entries.withLock { all in
            for key in Array(all.keys) where limits[key] == nil {
                if all[key]!.queue.isIdle { all[key] = nil } else { all[key]!.configured = false }
            }
            for (key, limit) in limits {
                var e = all[key] ?? Entry(queue: ConcurrencyQueue(limit: limit))
                e.configured = true
                let outcome = e.queue.update(limit, now: now)
                collect(outcome, key: key, entry: &e, grants: &grants, timeouts: &timeouts)
                all[key] = e
            }
        }
        deliver(grants, timeouts, at: now)
    }

    /// Asks for a slot of `key`. With none free and room in the queue, `onGrant` is called later (on any thread)
    /// with the slot, or with the timeout when the deadline passed as a slot came free; the caller's own timer calls
    /// ``timeOut(_:)`` at the deadline.
    func acquire(_ key: Key, now: UInt64, onGrant: @escaping @Sendable (Grant) -> Void) -> Acquisition {
        let id = nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        let admission: ConcurrencyQueue.Admission? = entries.withLock { all in
            guard var e = all[key] else { return nil }
            let a = e.queue.admit(id: id, now: now)
            switch a {
            case .granted: break
            case .queued: e.callbacks[id] = onGrant
            case .refused: e.refused[.queueFull, default: 0] += 1
            }
            all[key] = e
            return a
        }
        switch admission {
        case nil, .granted:
            return .granted(UpstreamSlot(limiter: self, key: key, acquired: now, counted: admission != nil))
        case .queued(let deadline): return .queued(QueuedWait(limiter: self, key: key, id: id), deadline: deadline)
        case .refused(let wait): return .refused(retryAfterSeconds: wait)
        }
    }

    /// The waiter's deadline passed: it leaves the queue and is counted as timed out; returns `Retry-After`, or nil
    /// when it was no longer waiting (granted meanwhile: its callback is on its way).
    func timeOut(_ wait: QueuedWait) -> Int? {
        entries.withLock { all in
            guard var e = all[wait.key], e.queue.cancel(id: wait.id) else { return nil }
            e.callbacks[wait.id] = nil
            e.refused[.queueTimeout, default: 0] += 1
            let after = e.queue.retryAfter(ahead: e.queue.queued)
            all[wait.key] = e
            return after
        }
    }

    func snapshot() -> [Snapshot] {
        entries.withLock { all in
            all.map { key, e in
                Snapshot(key: key, limit: e.queue.limit, open: e.queue.open, queued: e.queue.queued, refused: e.refused)
            }
        }.sorted { ($0.key.scope.rawValue, $0.key.name) < ($1.key.scope.rawValue, $1.key.name) }
    }

    // MARK: - for the slot and the wait

    func release(_ key: Key, held: UInt64) {
        let now = Self.uptime()
        var grants: [(Key, UInt64, @Sendable (Grant) -> Void)] = []
        var timeouts: [(Int, @Sendable (Grant) -> Void)] = []
        entries.withLock { all in
            guard var e = all[key] else { return }
            let outcome = e.queue.release(held: held, now: now)
            collect(outcome, key: key, entry: &e, grants: &grants, timeouts: &timeouts)
            if !e.configured, e.queue.isIdle { all[key] = nil } else { all[key] = e }
        }
        deliver(grants, timeouts, at: now)
    }

    func cancel(_ key: Key, id: UInt64) {
        entries.withLock { all in
            guard var e = all[key], e.queue.cancel(id: id) else { return }
            e.callbacks[id] = nil
            all[key] = e
        }
    }

    private func collect(
        _ outcome: ConcurrencyQueue.Outcome, key: Key, entry e: inout Entry,
        grants: inout [(Key, UInt64, @Sendable (Grant) -> Void)], timeouts: inout [(Int, @Sendable (Grant) -> Void)]
    ) {
        for id in outcome.granted {
            if let f = e.callbacks.removeValue(forKey: id) { grants.append((key, id, f)) }
        }
        for id in outcome.expired {
            e.refused[.queueTimeout, default: 0] += 1
            if let f = e.callbacks.removeValue(forKey: id) {
                timeouts.append((e.queue.retryAfter(ahead: e.queue.queued), f))
            }
        }
    }

    /// Calls the callbacks outside the lock (a slot that is dropped at once releases, which takes the lock again).
    private func deliver(
        _ grants: [(Key, UInt64, @Sendable (Grant) -> Void)], _ timeouts: [(Int, @Sendable (Grant) -> Void)],
        at now: UInt64
    ) {
        for (key, _, f) in grants { f(.granted(UpstreamSlot(limiter: self, key: key, acquired: now, counted: true))) }
        for (after, f) in timeouts { f(.timedOut(retryAfterSeconds: after)) }
    }
}

/// A slot of a concurrency cap, held while an exchange has its upstream requests open: given back when dropped.
final class UpstreamSlot: Sendable {
    let key: UpstreamLimiter.Key
    private let limiter: UpstreamLimiter
    private let acquired: UInt64
    /// False when the cap was gone (removed by a reload between the plan and the acquisition): nothing to give back.
    private let counted: Bool

    init(limiter: UpstreamLimiter, key: UpstreamLimiter.Key, acquired: UInt64, counted: Bool) {
        self.limiter = limiter
        self.key = key
        self.acquired = acquired
        self.counted = counted
    }

    deinit {
        if counted { limiter.release(key, held: UpstreamLimiter.uptime() &- acquired) }
    }
}

/// A place in a cap's queue: dropping it leaves the queue (a client that disconnected, an exchange answered).
final class QueuedWait: Sendable {
    let key: UpstreamLimiter.Key
    let id: UInt64
    private let limiter: UpstreamLimiter

    init(limiter: UpstreamLimiter, key: UpstreamLimiter.Key, id: UInt64) {
        self.limiter = limiter
        self.key = key
        self.id = id
    }

    deinit { limiter.cancel(key, id: id) }
}
