import Logging

/// `rate_limit` and `daily_quota` on a forwarded request: each applicable credential's limits are checked in turn,
/// and the first one used up answers 429 with `Retry-After` without contacting the upstream. Limits counted in
/// this process decide at once; under `[cluster]` the fleet's (``FleetLimiter``) decide at once from the permits
/// this replica leased, or park the exchange (as a concurrency queue does: no thread blocked, the body buffered)
/// until a lease from Redis comes back.
extension ClientConnection {
    /// One limit to pass.
    enum LimitCheck {
        /// A token bucket in this process: `scope = "client"` (per client), or `"credential"` without `[cluster]`.
        case bucket(Credential, RateLimit)
        /// `daily_quota` counted in this process (no `[cluster]`).
        case quota(Credential, Int)
        /// Counted by the fleet in Redis.
        case fleet(Credential, FleetLimit)
    }

    enum LimitStep {
        case passed
        case refused(ErrorResponse, retryAfter: Int)
        /// Waits for the fleet's lease; the exchange goes on from the callback.
        case pending
    }

    /// The limits of every credential that applies to one of `targets`, each credential once: its `rate_limit`,
    /// then its `daily_quota`.
    func limitChecks(store: CredentialStore, targets: [URLTarget]) -> [LimitCheck] {
        var seen = Set<String>()
        var checks: [LimitCheck] = []
        let fleet = context.shared.fleet != nil
        for target in targets {
            for c in store.applicable(for: target) where seen.insert(c.name).inserted {
                if let limit = c.rateLimit {
                    checks.append(
                        fleet && limit.scope == .credential ? .fleet(c, .rate(c.name, limit)) : .bucket(c, limit))
                }
                if let quota = c.limits.dailyQuota {
                    checks.append(fleet ? .fleet(c, .daily(c.name, quota: quota)) : .quota(c, quota))
                }
            }
        }
        return checks
    }

    /// Spends one request of each check from `start` on. The bucket of `scope = "client"` is this client's (its
    /// `[[client]]` name, else its address); with `scope = "credential"` everybody's.
    func passLimits(_ checks: [LimitCheck], from start: Int) -> LimitStep {
        // (The refusing credential is noted on the exchange for its metrics: `credential` stays unset, as nothing
        // of it was applied.)
        let who = client.map { "user:\($0.name)" } ?? "address:\(address)"
        var i = start
        while i < checks.count {
            switch checks[i] {
            case .bucket(let c, let limit):
                if case .limited(let wait) = context.access.rateLimiter.take(
                    credential: c.name, client: limit.scope == .credential ? "" : who, limit: limit, now: now)
                {
                    let per = limit.scope == .credential ? " (all clients together)" : ""
                    return refuseOverLimit(
                        c, reason: "rate", detail: "\(limit.requests)/\(limit.perSeconds)s\(per)", retryAfter: wait,
                        message:
                            "Rate limit of credential '\(c.name)' exceeded: \(limit.requests) requests per \(limit.perSeconds) s\(per)"
                    )
                }
            case .quota(let c, let quota):
                if case .limited(let wait) = context.shared.dailyQuotas.take(
                    credential: c.name, quota: quota, now: nowMillis() / 1000)
                {
                    return refuseOverLimit(
                        c, reason: "daily_quota", detail: "\(quota)/day", retryAfter: wait,
                        message: "Daily quota of credential '\(c.name)' used up: \(quota) requests per UTC day")
                }
            case .fleet(let c, let limit):
                guard let fleet = context.shared.fleet else { break }
                let me = LoopBound(self, queue: loop.queue)
                let serial = SerialBox()
                let index = i
                switch fleet.take(
                    limit, now: nowMillis(),
                    whenDecided: { d, byShare in
                        me.queue.async {
                            guard let s = serial.value else { return }
                            me.value.fleetDecided(d, byShare: byShare, checks: checks, index: index, serial: s)
                        }
                    })
                {
                case .decided(.allowed):
                    break
                case .decided(.limited(let wait, let share)):
                    return refuseOverFleetLimit(c, limit, retryAfter: wait, share: share, replicas: fleet.replicas)
                case .pending:
                    // The callback hops to this queue, so it runs after the serial is set here.
                    guard let s = machine.queueEntered() else { return .pending }
                    serial.value = s
                    ex?.trace?.beginFleetWait(credential: c.name, kind: limit.kind == .rate ? "rate" : "daily_quota")
                    return .pending
                }
            }
            i += 1
        }
        return .passed
    }

    /// The fleet's answer for check `index` of an exchange that waited for a lease.
    private func fleetDecided(
        _ d: FleetLimiter.Decision, byShare: Bool, checks: [LimitCheck], index: Int, serial: Int
    ) {
        // An exchange answered or closed meanwhile does not need it (the permit is spent: never more than the
        // limit, at worst one less).
        guard machine.awaitsSlot(serial: serial), let x = ex else { return }
        machine.slotGranted()
        if let trace = x.trace {
            let allowed = d == .allowed
            trace.endFleetWait(outcome: byShare ? "fallback" : allowed ? "granted" : "limited", allowed: allowed)
        }
        var step = LimitStep.passed
        switch d {
        case .limited(let wait, let share):
            if case .fleet(let c, let limit) = checks[index] {
                step = refuseOverFleetLimit(
                    c, limit, retryAfter: wait, share: share, replicas: context.shared.fleet?.replicas ?? 1)
            }
        case .allowed:
            step = passLimits(checks, from: index + 1)
        }
        switch step {
        case .refused(let error, let retryAfter):
            respond(error, close: false, extraHeaders: "Retry-After: \(retryAfter)\r\n")
        case .passed:
            admitAfterLimits()
        case .pending:
            break
        }
        run(machine.continuationAfterCallback)
    }

    /// The 429 for a limit the fleet shares: its count in Redis is used up, or (`share` set) this replica's share
    /// of it while Redis cannot be used.
    private func refuseOverFleetLimit(
        _ c: Credential, _ limit: FleetLimit, retryAfter: Int, share: Int?, replicas: Int
    ) -> LimitStep {
        let whose =
            share.map {
                "this replica's share while the fleet's Redis cannot be used: \($0) = \(limit.requests) ÷ \(replicas) replicas"
            }
            ?? "all clients of all replicas together"
        switch limit.kind {
        case .rate:
            return refuseOverLimit(
                c, reason: "rate",
                detail: "\(limit.requests)/\(limit.windowSeconds)s (fleet\(share == nil ? "" : " share"))",
                retryAfter: retryAfter,
                message:
                    "Rate limit of credential '\(c.name)' exceeded: \(limit.requests) requests per \(limit.windowSeconds) s (\(whose))"
            )
        case .daily:
            return refuseOverLimit(
                c, reason: "daily_quota", detail: "\(limit.requests)/day (fleet\(share == nil ? "" : " share"))",
                retryAfter: retryAfter,
                message:
                    "Daily quota of credential '\(c.name)' used up: \(limit.requests) requests per UTC day (\(whose))")
        }
    }

    /// The 429 for credential `c`'s `rate_limit` or `daily_quota`: counted (by reason), logged (throttled).
    private func refuseOverLimit(
        _ c: Credential, reason: String, detail: String, retryAfter: Int, message: String
    ) -> LimitStep {
        if let m = ProxyMetrics.active {
            m.rateLimited(credential: c.name, reason: reason)
            ex?.limitedBy = c.name
        }
        if let held = context.access.throttle.admit("\(reason):\(c.name)", now: now) {
            logger.warning(
                reason == "rate" ? "rate limit exceeded" : "daily quota used up",
                metadata: [
                    "credential": "\(c.name)", "client": "\(client?.name ?? "\(address)")", "limit": "\(detail)",
                    "refused_since_last_report": "\(held)",
                ])
        }
        return .refused(
            ErrorResponse(status: 429, message: message, details: ["Retry after \(retryAfter) s."]),
            retryAfter: retryAfter)
    }
}
