import Testing

@testable import AuthProxyCore

/// `[proxy] upstream_retries`, `max_retry_wait_seconds`, `retry_budget_percent`: loading, limits, reload.
@Suite struct RetryConfigTests {
    let loader = ConfigLoader(environment: [:])

    @Test func defaults() throws {
        let c = try loader.parse("")
        #expect(c.upstreamRetries == 2)
        #expect(c.maxRetryWaitSeconds == 5)
        #expect(c.retryBudgetPercent == 20)
        #expect(RetryPolicy(c) == RetryPolicy(maxRetries: 2, maxWaitSeconds: 5))
    }

    @Test func setAndOff() throws {
        let c = try loader.parse(
            """
            [proxy]
            upstream_retries = 0
            max_retry_wait_seconds = 30
            retry_budget_percent = 50
            """)
        #expect(c.upstreamRetries == 0)
        #expect(!RetryPolicy(c).isEnabled)
        #expect(c.maxRetryWaitSeconds == 30)
        #expect(c.retryBudgetPercent == 50)
    }

    @Test func outOfRange() {
        expectRejected(
            loader, "[proxy]\nupstream_retries = 11", key: "proxy.upstream_retries", line: 2, fragment: "outside 0…10")
        expectRejected(
            loader, "[proxy]\nmax_retry_wait_seconds = -1", key: "proxy.max_retry_wait_seconds", line: 2,
            fragment: "outside")
        expectRejected(
            loader, "[proxy]\nretry_budget_percent = 101", key: "proxy.retry_budget_percent", line: 2,
            fragment: "outside")
    }

    @Test func aReloadAppliesThemLive() throws {
        let d = ConfigDiff(
            running: try loader.parse("[proxy]\nupstream_retries = 2"),
            loaded: try loader.parse(
                "[proxy]\nupstream_retries = 3\nmax_retry_wait_seconds = 1\nretry_budget_percent = 10"))
        #expect(d.live == ["proxy.upstream_retries", "proxy.max_retry_wait_seconds", "proxy.retry_budget_percent"])
        #expect(d.restartNeeded.isEmpty)
        #expect(d.effective.upstreamRetries == 3)
    }
}

/// `[proxy] get_as_post_above_bytes`: loading, limits, reload.
@Suite struct GetAsPostConfigTests {
    let loader = ConfigLoader(environment: [:])

    @Test func defaultSetAndOff() throws {
        #expect(try loader.parse("").getAsPostAboveBytes == 2048)
        #expect(try loader.parse("[proxy]\nget_as_post_above_bytes = 4000").getAsPostAboveBytes == 4000)
        #expect(try loader.parse("[proxy]\nget_as_post_above_bytes = 0").getAsPostAboveBytes == 0)
        expectRejected(
            loader, "[proxy]\nget_as_post_above_bytes = -1", key: "proxy.get_as_post_above_bytes", line: 2,
            fragment: "outside")
        let d = ConfigDiff(
            running: try loader.parse(""), loaded: try loader.parse("[proxy]\nget_as_post_above_bytes = 0"))
        #expect(d.live == ["proxy.get_as_post_above_bytes"])
    }
}
