import Testing

@testable import AuthProxyCore

/// ``RetryPolicy`` as tables: what is retried, after how long, and what is relayed.
@Suite struct RetryPolicyTests {
    static let ms: UInt64 = 1_000_000
    static let s: UInt64 = 1_000_000_000
    /// 2 retries, 5 s cap, 100 ms base.
    static let policy = RetryPolicy(maxRetries: 2, maxWaitSeconds: 5)

    @Test(arguments: [
        ("GET", false, true), ("HEAD", false, true), ("OPTIONS", false, true),
        ("GET", true, false), ("POST", false, false), ("PUT", false, false), ("DELETE", false, false),
        ("PATCH", false, false), ("TRACE", false, false), ("get", false, false),
    ])
    func onlyBodilessIdempotentReadsAreRetried(method: String, hasBody: Bool, retried: Bool) {
        #expect(RetryPolicy.mayRetry(method: method, hasBody: hasBody, edits: false) == retried)
    }

    @Test(arguments: [
        "/arcgis/rest/services/x/FeatureServer/0/deleteFeatures", "/arcgis/rest/services/x/FeatureServer/applyEdits",
        "/portal/sharing/rest/content/users/a/items/abc/delete", "/arcgis/rest/services/T/GPServer/t/execute",
    ])
    func anEditIsNeverRetriedWhateverTheMethod(path: String) {
        #expect(!RetryPolicy.mayRetry(method: "GET", hasBody: false, edits: ArcGISOperation.isEdit(path: path[...])))
        let query: Substring = "/arcgis/rest/services/x/FeatureServer/0/query"
        #expect(RetryPolicy.mayRetry(method: "GET", hasBody: false, edits: ArcGISOperation.isEdit(path: query)))
    }

    @Test func statusesThatAreRetried() {
        #expect(RetryPolicy.cause(status: 502) == .status502)
        #expect(RetryPolicy.cause(status: 503) == .status503)
        #expect(RetryPolicy.cause(status: 504) == .status504)
        #expect(RetryPolicy.cause(status: 429) == .status429)
        for status in [200, 204, 304, 400, 401, 403, 404, 414, 498, 499, 500, 501, 505] {
            #expect(RetryPolicy.cause(status: status) == nil, "status \(status)")
        }
    }

    @Test func failuresThatAreRetried() {
        for f: UpstreamFailure in [.connect, .reset, .nothing, .partial] {
            #expect(RetryPolicy.cause(failure: f, viaParent: false, denied: false) == .reset, "\(f)")
        }
        for f: UpstreamFailure in [
            .dns, .timeout, .untrustedCertificate, .pinMismatch, .tlsHandshake, .protocolError,
            .clientGone, .requestBody, .other("x"),
        ] {
            #expect(RetryPolicy.cause(failure: f, viaParent: false, denied: false) == nil, "\(f)")
        }
        // A parent's failure is the parent failover's; a refused destination would be refused again.
        #expect(RetryPolicy.cause(failure: .connect, viaParent: true, denied: false) == nil)
        #expect(RetryPolicy.cause(failure: .connect, viaParent: false, denied: true) == nil)
    }

    @Test func retryAfterIsReadInDeltaSecondsOrAsADate() {
        #expect(RetryPolicy.retryAfterSeconds("1") == 1)
        #expect(RetryPolicy.retryAfterSeconds(" 30 ") == 30)
        #expect(RetryPolicy.retryAfterSeconds("0") == 0)
        #expect(RetryPolicy.retryAfterSeconds(nil) == nil)
        #expect(RetryPolicy.retryAfterSeconds("") == nil)
        #expect(RetryPolicy.retryAfterSeconds("-1") == nil)
        #expect(RetryPolicy.retryAfterSeconds("1.5") == nil)
        // An HTTP-date: measured from the response's Date (the server's clock), else from ours; rounded up.
        let date = ServerClock.parseHTTPDate("Wed, 21 Oct 2015 07:28:00 GMT")!
        #expect(RetryPolicy.retryAfterSeconds("Wed, 21 Oct 2015 07:28:02 GMT", responseDate: date, now: 0) == 2)
        #expect(RetryPolicy.retryAfterSeconds("Wed, 21 Oct 2015 07:28:02 GMT", now: date + 500) == 2)
        #expect(RetryPolicy.retryAfterSeconds("Wed, 21 Oct 2015 07:30:00 GMT", responseDate: date, now: 0) == 120)
        // A server clock an hour behind ours still means the two seconds it names.
        #expect(
            RetryPolicy.retryAfterSeconds(
                "Wed, 21 Oct 2015 07:28:02 GMT", responseDate: date, now: date + 3_600_000) == 2)
        #expect(RetryPolicy.retryAfterSeconds("Wed, 21 Oct 2015 07:27:00 GMT", responseDate: date, now: 0) == 0)
        #expect(RetryPolicy.retryAfterSeconds("Wednesday, 21-Oct-15 07:28:00 GMT", now: date) == nil)
        #expect(RetryPolicy.retryAfterSeconds("tomorrow", now: date) == nil)
        #expect(RetryPolicy.retryAfterSeconds("99999999999999999999") == nil)
    }

    @Test func backoffDoublesWithEqualJitter() {
        let p = Self.policy
        // random 0: the fixed half; random max: the whole step.
        #expect(p.backoff(retriesDone: 0, random: 0) == 50 * Self.ms)
        #expect(p.backoff(retriesDone: 0, random: 50 * Self.ms) == 100 * Self.ms)
        #expect(p.backoff(retriesDone: 1, random: 0) == 100 * Self.ms)
        #expect(p.backoff(retriesDone: 2, random: 0) == 200 * Self.ms)
        for r: UInt64 in [0, 1, 12345, UInt64.max] {
            let b = p.backoff(retriesDone: 1, random: r)
            #expect(b >= 100 * Self.ms && b <= 200 * Self.ms)
        }
        // Capped at max_retry_wait_seconds, even after many doublings.
        #expect(p.backoff(retriesDone: 10, random: UInt64.max) <= 5 * Self.s)
        #expect(p.backoff(retriesDone: 63, random: 0) == 5 * Self.s / 2)
    }

    @Test func aFailureIsRetriedUntilTheRetriesAreSpent() {
        let p = Self.policy
        #expect(
            p.decide(cause: .status503, retryAfter: nil, retriesDone: 0, random: 0)
                == .retry(afterNanoseconds: 50 * Self.ms))
        #expect(
            p.decide(cause: .reset, retryAfter: nil, retriesDone: 1, random: 0)
                == .retry(afterNanoseconds: 100 * Self.ms))
        #expect(p.decide(cause: .status502, retryAfter: nil, retriesDone: 2, random: 0) == .giveUp)
        #expect(
            RetryPolicy(maxRetries: 0, maxWaitSeconds: 5).decide(
                cause: .reset, retryAfter: nil, retriesDone: 0, random: 0) == .giveUp)
    }

    @Test func retryAfterIsHonouredUpToTheCap() {
        let p = Self.policy
        #expect(
            p.decide(cause: .status429, retryAfter: 1, retriesDone: 0, random: 0) == .retry(afterNanoseconds: Self.s))
        #expect(
            p.decide(cause: .status429, retryAfter: 5, retriesDone: 1, random: 0)
                == .retry(afterNanoseconds: 5 * Self.s))
        #expect(
            p.decide(cause: .status503, retryAfter: 2, retriesDone: 0, random: 0)
                == .retry(afterNanoseconds: 2 * Self.s))
        // Retry-After: 0 is no excuse to skip the backoff.
        #expect(
            p.decide(cause: .status503, retryAfter: 0, retriesDone: 0, random: 0)
                == .retry(afterNanoseconds: 50 * Self.ms))
        // Longer than the cap, or a 429 that names no wait: the client gets the answer.
        #expect(p.decide(cause: .status429, retryAfter: 6, retriesDone: 0, random: 0) == .giveUp)
        #expect(p.decide(cause: .status503, retryAfter: 60, retriesDone: 0, random: 0) == .giveUp)
        #expect(p.decide(cause: .status429, retryAfter: nil, retriesDone: 0, random: 0) == .giveUp)
    }
}
