import Dispatch
import Logging

/// Upstream retries (`[proxy] upstream_retries`): carrying out ``RetryPolicy`` and the host's ``RetryBudget``.
/// An attempt that failed before anything reached the client is dropped (its transfer stopped, its decided
/// head forgotten), and after the backoff the same request (the URL and fields the attempt was started with,
/// token included) starts again through ``startTransfer(url:headers:)``. The verdict of the policy and the budget
/// (``RetryVerdict``) is decided before the machine hears of the failure, and passed in with it. The token retry
/// after a rejection is separate (``retryWithFreshToken(layer:)``): each has its own count.
extension ClientConnection {
    /// Called as a transfer starts: counts it in the host's budget unless it is a retry (upstream or token).
    func countInRetryBudget(url: URLTarget, now: UInt64) {
        if context.retryPolicy.isEnabled, machine.upstreamRetries == 0, machine.attempt == 1 {
            loop.retryBudget.request(RetryBudget.Host(host: url.host, port: url.port), now: now)
        }
    }

    /// Whether a final response head is a 414 to a `GET` that ``GetAsPost`` can send as a form (for
    /// ``ExchangeStateMachine/finalHead(asForm:verdict:)``).
    func sendsAsFormAfter414(_ x: ExchangeContext) -> Bool {
        guard x.responseHead.status == 414, x.responseHead.violation == nil, let a = x.attempt else { return false }
        return a.goesAsFormAfter414(limit: context.config.getAsPostAboveBytes, matched: x.credential != nil)
    }

    /// The cause ``RetryPolicy`` gives a final response head's status, when retries apply to the request.
    func statusRetryCause(_ x: ExchangeContext) -> RetryPolicy.Cause? {
        guard x.attempt?.resendable == true, context.retryPolicy.isEnabled, x.responseHead.violation == nil else {
            return nil
        }
        return RetryPolicy.cause(status: x.responseHead.status)
    }

    /// The verdict on retrying a final head's status (its `Retry-After` honoured), asked when the machine
    /// considers the retry (``ExchangeStateMachine/considersRetry(_:asForm:)``).
    func statusRetryVerdict(_ x: ExchangeContext, cause: RetryPolicy.Cause) -> RetryVerdict {
        var retryAfter: Int? = nil
        if let v = x.responseHead.string(of: "retry-after") {
            retryAfter = RetryPolicy.retryAfterSeconds(
                v, responseDate: x.responseHead.string(of: "date").flatMap { ServerClock.parseHTTPDate($0) },
                now: nowMillis())
        }
        return retryVerdict(x, cause: cause, retryAfter: retryAfter)
    }

    /// Asks the policy and the host's budget whether the attempt goes again (``RetryVerdict``); a budget that
    /// refuses is counted and logged here, at a limited rate.
    func retryVerdict(_ x: ExchangeContext, cause: RetryPolicy.Cause, retryAfter: Int?) -> RetryVerdict {
        guard let url = x.attempt?.url else { return .refused }
        let m = ProxyMetrics.active
        // The retry before this attempt (if any) did not help.
        if let previous = x.retryCause {
            m?.upstreamRetry(cause: previous, result: "failure")
            x.retryCause = nil
        }
        let host = RetryBudget.Host(host: url.host, port: url.port)
        let at = now
        loop.retryBudget.ratioPercent = context.config.retryBudgetPercent
        let verdict = RetryVerdict.decide(
            cause, retryAfter: retryAfter, retriesDone: machine.upstreamRetries, policy: context.retryPolicy,
            random: UInt64.random(in: 0...UInt64.max), budget: &loop.retryBudget, host: host, now: at)
        if verdict == .budgetExhausted {
            m?.upstreamRetry(cause: cause, result: "budget_exhausted")
            if let held = context.access.throttle.admit("retry-budget:\(url.host):\(url.port)", now: at) {
                logger.warning(
                    "retry budget of the upstream exhausted, relaying its answer",
                    metadata: [
                        "destination": "\(url.urlHost):\(url.port)", "cause": "\(cause.rawValue)",
                        "budget": "\(context.config.retryBudgetPercent)%", "refused_since_last_report": "\(held)",
                    ])
            }
        }
        return verdict
    }

    /// The machine dropped the attempt for a retry (exchange `serial`): the transfer is stopped, its answer
    /// forgotten, and the same request goes again after `wait`. `detail`: what went wrong, for the log line
    /// (libcurl's message for a failed connection).
    func scheduleRetry(_ x: ExchangeContext, serial: Int, after wait: UInt64, cause: RetryPolicy.Cause, detail: String?)
    {
        x.retryCause = cause
        cancelTransfer()
        dropResponse()
        if let url = x.attempt?.url {
            var metadata: Logger.Metadata = [
                "client": "\(peer)", "url": "\(url.origin)\(url.path)",
                "cause": "\(cause.rawValue)", "attempt": "\(machine.upstreamRetries + 1)",
                "wait_ms": "\(wait / 1_000_000)",
            ]
            if let detail { metadata["detail"] = "\(detail)" }
            logger.info("upstream attempt failed, retrying", metadata: metadata)
        }
        // Never started from inside a libcurl callback (where this is decided): always on a later turn.
        onLoop(after: wait) { me in
            guard me.machine.awaitsRetry(serial: serial) else { return }
            me.resendUpstream()
        }
    }

    /// The machine dropped a `GET` refused 414 to send it again at once as a `POST` form (``GetAsPost``). Not an
    /// upstream retry: it spends neither the retries nor the budget.
    func resendAsForm(_ x: ExchangeContext, serial: Int) {
        x.attempt?.refusedAsTooLong()
        ProxyMetrics.active?.getAsPost(.status414)
        cancelTransfer()
        dropResponse()
        if let url = x.attempt?.url {
            logger.info(
                "upstream refused the URL as too long (414), sending it as a POST form",
                metadata: [
                    "client": "\(peer)", "url": "\(url.origin)\(url.path)",
                    "url_bytes": "\(url.pathAndQuery.utf8.count)",
                ])
        }
        // Decided inside a libcurl callback, where no transfer may start: on the next turn.
        onNextTurn { me in
            guard me.machine.awaitsRetry(serial: serial) else { return }
            me.resendUpstream()
        }
    }

    /// The backoff is over: the same request goes again.
    private func resendUpstream() {
        guard let x = ex, let a = x.attempt, a.resendable else { return }
        x.formOffset = 0
        x.replayOffset = 0
        startTransfer(url: a.url, headers: a.headers)
        updateReadInterest()
    }

    /// The exchange ended: the outcome of its last upstream retry, if one is still uncounted.
    func recordRetryOutcome(_ m: ProxyMetrics, _ x: ExchangeContext, status: Int) {
        guard let cause = x.retryCause else { return }
        x.retryCause = nil
        m.upstreamRetry(cause: cause, result: status >= 200 && status < 500 && status != 429 ? "success" : "failure")
    }
}
