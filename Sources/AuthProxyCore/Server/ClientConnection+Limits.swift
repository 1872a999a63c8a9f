import Dispatch
import Logging

/// Concurrency caps on a forwarded request (`max_concurrent` of `[[upstream]]` hosts and credentials): the exchange
/// takes a slot of each cap that applies before anything goes upstream, and holds them until it ends, so its token
/// fetch, its attempts and its retries all happen inside them. With no slot free it waits in the cap's queue,
/// parked (no thread blocked; the client's body is buffered as while a route is awaited) until a slot is granted,
/// its `queue_timeout_seconds` passes, or the client leaves (the exchange is dropped, and its place with it).
extension ClientConnection {
    /// The caps of the request, in the one order every exchange takes them (host first, then credentials by name),
    /// so two exchanges never each hold a slot the other waits for.
    func concurrencyKeys(store: CredentialStore, plan: borrowing ForwardPlan) -> [UpstreamLimiter.Key] {
        let caps = context.access.caps
        var names = Set<String>()
        for target in plan.rateLimitTargets {
            for c in store.applicable(for: target) where caps.credentials[c.name] != nil { names.insert(c.name) }
        }
        var keys: [UpstreamLimiter.Key] = []
        if let host = caps.host(plan.upstreamURL.host, port: plan.upstreamURL.port) { keys.append(host) }
        for n in names.sorted() { keys.append(UpstreamLimiter.Key(scope: .credential, name: n)) }
        return keys
    }

    /// Takes the slots of `keys` from index `from` on; the request goes on (``forwardAdmitted()``) when it holds
    /// them all.
    func admitUpstream(_ keys: [UpstreamLimiter.Key], from start: Int) {
        guard let x = ex else { return }
        let limiter = context.shared.upstreamLimiter
        var i = start
        while i < keys.count {
            let key = keys[i]
            let me = LoopBound(self, queue: loop.queue)
            let next = i + 1
            // The serial is known once queued; the callback can only come after this returns (it is called
            // outside the limiter's lock, by a release that hops here).
            let serial = SerialBox()
            switch limiter.acquire(
                key, now: now,
                onGrant: { grant in
                    me.queue.async {
                        guard let s = serial.value else { return }
                        me.value.slotDecided(grant, keys: keys, next: next, serial: s)
                    }
                })
            {
            case .granted(let slot):
                x.upstreamSlots.append(slot)
                i += 1
            case .queued(let wait, let deadline):
                x.queuedWait = wait
                guard let s = machine.queueEntered() else { return }
                serial.value = s
                let id = wait.id
                loop.queue.asyncAfter(deadline: DispatchTime(uptimeNanoseconds: deadline)) {
                    me.value.queueDeadline(key: key, id: id, serial: s)
                }
                return
            case .refused(let wait):
                refuseQueued(key, reason: .queueFull, retryAfter: wait)
                return
            }
        }
        forwardAdmitted()
    }

    /// A slot, or the timeout, for the exchange that waited in a queue.
    private func slotDecided(_ grant: UpstreamLimiter.Grant, keys: [UpstreamLimiter.Key], next: Int, serial: Int) {
        // An exchange answered or closed meanwhile drops the slot here, which gives it back.
        guard machine.awaitsSlot(serial: serial), let x = ex else { return }
        x.queuedWait = nil
        switch grant {
        case .granted(let slot):
            x.upstreamSlots.append(slot)
            machine.slotGranted()
            admitUpstream(keys, from: next)
        case .timedOut(let wait):
            refuseQueued(keys[next - 1], reason: .queueTimeout, retryAfter: wait)
        }
        run(machine.continuationAfterCallback)
    }

    /// `queue_timeout_seconds` after the exchange entered the queue of `key`.
    private func queueDeadline(key: UpstreamLimiter.Key, id: UInt64, serial: Int) {
        guard machine.awaitsSlot(serial: serial), let x = ex, let wait = x.queuedWait, wait.id == id else { return }
        guard let after = context.shared.upstreamLimiter.timeOut(wait) else { return }
        x.queuedWait = nil
        refuseQueued(key, reason: .queueTimeout, retryAfter: after)
        run(machine.continuationAfterCallback)
    }

    /// 503 with `Retry-After`: the queue of `key` is full, or the request waited its timeout.
    private func refuseQueued(_ key: UpstreamLimiter.Key, reason: UpstreamLimiter.RefusalReason, retryAfter: Int) {
        ex?.upstreamSlots = []
        let what = key.scope == .host ? "upstream '\(key.name)'" : "credential '\(key.name)'"
        let limit = context.access.caps.limit(of: key)
        let cause =
            reason == .queueFull
            ? "\(limit.map { "\($0.maxConcurrent)" } ?? "all") requests are open against \(what) and \(limit.map { "\($0.maxQueued)" } ?? "the most allowed") are waiting (max_concurrent, max_queued)"
            : "the request waited \(limit.map { "\($0.queueTimeoutSeconds)" } ?? "the most allowed") s for one of the \(limit.map { "\($0.maxConcurrent)" } ?? "") slots of \(what) (queue_timeout_seconds)"
        if let held = context.access.throttle.admit(
            "queue:\(key.scope.rawValue):\(key.name):\(reason.rawValue)", now: now)
        {
            logger.warning(
                "upstream concurrency limit: request refused",
                metadata: [
                    "scope": "\(key.scope.rawValue)", "name": "\(key.name)", "reason": "\(reason.rawValue)",
                    "client": "\(client?.name ?? "\(address)")", "refused_since_last_report": "\(held)",
                ])
        }
        respond(
            ErrorResponse(
                status: 503, message: "Too many requests open against \(what): \(cause)",
                details: ["Retry after \(retryAfter) s."]),
            close: false, extraHeaders: "Retry-After: \(retryAfter)\r\n")
    }
}

/// The exchange's serial, known once it is queued, for a grant callback made before it was.
final class SerialBox: @unchecked Sendable {
    // Written on the connection's queue before the callback can run there (the callback hops to that queue).
    var value: Int? = nil
}
