/// Whether, and after how long, a request goes to the upstream again after a failed attempt: `[proxy]
/// upstream_retries` and `max_retry_wait_seconds`. Pure; the executor (``ClientConnection``) asks it when an
/// attempt ends in a retriable way and carries out the answer, after asking the host's ``RetryBudget``.
///
/// **What is retried.** Only requests a client may expect to be repeated without harm and whose request can be
/// sent again as it was: `GET`, `HEAD`, `OPTIONS` without a request body (RFC 9110 §9.2.2; `PUT` and `DELETE`
/// are idempotent too, but an ArcGIS or OGC edit is not something to repeat behind the client's back), never an
/// ArcGIS edit operation whatever its method (``mayRetry(method:hasBody:edits:)``), and only while nothing of the
/// answer has reached the client (the executor checks that with the ``ExchangeStateMachine``).
///
/// **When.** The connection was refused or reset, or closed before the answer was complete (``Cause/reset``);
/// or the upstream answered 502, 503 or 504 (load balancers in front of a restarting service); or 429 with a
/// `Retry-After` no longer than ``maxWait``. A 429 without `Retry-After`, or with one longer than the cap, goes
/// to the client as it is: the server asked for a pause only the client can take. A 503 whose `Retry-After`
/// is longer than the cap is relayed for the same reason.
///
/// **Backoff.** Exponential from ``baseBackoff`` (doubling per retry), with "equal jitter" (half fixed, half
/// random) so that clients failed by the same event do not come back in step; never longer than ``maxWait``.
/// A `Retry-After` within the cap is waited for instead, when longer.
struct RetryPolicy: Equatable, Sendable {
    /// Why an attempt is retried (the `cause` label of `authproxy_upstream_retries_total`).
    enum Cause: String, Equatable, Sendable, CaseIterable {
        /// Refused, reset, or closed before the answer was complete.
        case reset
        case status502 = "502"
        case status503 = "503"
        case status504 = "504"
        case status429 = "429"
    }

    enum Decision: Equatable {
        /// Send the request again after this many nanoseconds.
        case retry(afterNanoseconds: UInt64)
        /// Relay the answer (or the error) as it is.
        case giveUp
    }

    /// At most this many attempts after the first (0: no retries).
    var maxRetries: Int
    /// The longest wait before a retry, and the longest `Retry-After` honoured.
    var maxWait: UInt64
    /// The wait before the first retry (before jitter).
    var baseBackoff: UInt64 = 100_000_000

    init(maxRetries: Int, maxWaitSeconds: Int, baseBackoff: UInt64 = 100_000_000) {
        self.maxRetries = maxRetries
        self.maxWait = UInt64(maxWaitSeconds) * 1_000_000_000
        self.baseBackoff = baseBackoff
    }

    init(_ config: ProxyConfig) {
        self.init(maxRetries: config.upstreamRetries, maxWaitSeconds: config.maxRetryWaitSeconds)
    }

    var isEnabled: Bool { maxRetries > 0 }

    /// Whether a request of this method may be retried at all. `hasBody`: the client sent a request body (it is
    /// not kept for a resend). `edits`: it names an ArcGIS edit (``ArcGISOperation/isEdit(path:)``), which is never
    /// retried whatever method carries it — a `GET …/deleteFeatures` is not safe to send twice because HTTP calls
    /// `GET` idempotent. The one `POST` that goes again is the form the proxy made from a read `GET`
    /// (``GetAsPost``), which `method` (the client's) stands for: the proxy made it, and only for operations that
    /// write nothing.
    static func mayRetry(method: String, hasBody: Bool, edits: Bool) -> Bool {
        guard !hasBody, !edits else { return false }
        switch method {
        case "GET", "HEAD", "OPTIONS": return true
        default: return false
        }
    }

    /// The cause a final response status gives for a retry (nil: the answer is relayed).
    static func cause(status: Int) -> Cause? {
        switch status {
        case 502: return .status502
        case 503: return .status503
        case 504: return .status504
        case 429: return .status429
        default: return nil
        }
    }

    /// The cause an upstream failure gives for a retry (nil: the error is answered). A refused or broken
    /// connection is retried; a name that does not resolve, a certificate that is not trusted, a destination
    /// `deny_destinations` refuses, an invalid answer or a timeout would fail the same way again (and a timeout
    /// has already made the client wait `upstream_timeout_seconds`). A parent proxy's failure is left to the
    /// parent failover, which already tried the other parents.
    static func cause(failure: UpstreamFailure, viaParent: Bool, denied: Bool) -> Cause? {
        guard !viaParent, !denied else { return nil }
        switch failure {
        case .connect, .reset, .nothing, .partial: return .reset
        default: return nil
        }
    }

    /// `Retry-After` in seconds (RFC 9110 §10.2.3): delta-seconds, or an IMF-fixdate measured from the response's
    /// `Date` (`responseDate`, epoch milliseconds on the server's clock, so a server whose clock is off still means
    /// the wait it names), else from `now` (ours). A date already past is 0. Nil when absent or neither form.
    static func retryAfterSeconds(_ value: String?, responseDate: Int64? = nil, now: Int64 = 0) -> Int? {
        guard let v = value?.trimmingASCIIWhitespace, !v.isEmpty else { return nil }
        if v.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) {
            return v.utf8.count <= 9 ? Int(v) : nil
        }
        guard let at = ServerClock.parseHTTPDate(v) else { return nil }
        let wait = at - (responseDate ?? now)
        guard wait > 0 else { return 0 }
        // Whole seconds, rounded up: a retry a moment early would meet the same refusal.
        return Int(min((wait + 999) / 1000, 999_999_999))
    }

    /// The decision after an attempt failed with `cause`. `retriesDone`: retries already made for this request;
    /// `retryAfter`: the response's `Retry-After` in seconds, if any; `random`: a uniformly random value (the
    /// jitter; injected so that tests are exact).
    func decide(cause: Cause, retryAfter: Int?, retriesDone: Int, random: UInt64) -> Decision {
        guard retriesDone < maxRetries else { return .giveUp }
        var floor: UInt64 = 0
        if let s = retryAfter {
            let wait = UInt64(s) * 1_000_000_000
            guard wait <= maxWait else { return .giveUp }
            floor = wait
        } else if cause == .status429 {
            return .giveUp
        }
        return .retry(afterNanoseconds: max(floor, backoff(retriesDone: retriesDone, random: random)))
    }

    /// Equal jitter: half of `base × 2^retriesDone` fixed, the other half random; capped at ``maxWait``.
    func backoff(retriesDone: Int, random: UInt64) -> UInt64 {
        let shift = UInt64(min(retriesDone, 20))
        let (full, overflow) = baseBackoff.multipliedReportingOverflow(by: 1 << shift)
        let capped = overflow ? maxWait : min(full, maxWait)
        let half = capped / 2
        return half + (half == 0 ? 0 : random % (half + 1))
    }
}

extension String {
    /// The string without leading and trailing spaces and tabs.
    fileprivate var trimmingASCIIWhitespace: Substring {
        let u = self[...]
        let start = u.firstIndex { $0 != " " && $0 != "\t" } ?? u.endIndex
        let end = u.lastIndex { $0 != " " && $0 != "\t" }.map { u.index(after: $0) } ?? start
        return u[start..<max(start, end)]
    }
}
