import Testing

@testable import AuthProxyCore

/// Readiness, prefetch decisions, token status and the status page, without sockets.
@Suite struct AdminLogicTests {
    static func token(issued: Int64, expires: Int64?) -> IssuedToken {
        IssuedToken(value: "SECRET-TOKEN-VALUE", expires: expires, issued: issued, ssl: false, referer: nil)
    }

    @Test func tokenStatusFollowsTheCache() {
        var cache = TokenCache<String>()
        let key = "gis|https://h/arcgis"
        guard case .startFetch(let t1) = cache.acquire(key: key, credential: "gis", now: 0, waiter: "a") else {
            Issue.record("expected a fetch")
            return
        }
        #expect(cache.status(key: key, now: 0)?.state == .refreshing)
        _ = cache.complete(t1, with: .success(Self.token(issued: 0, expires: 100_000)), now: 10)
        var s = cache.status(key: key, now: 20)
        #expect(
            s?.state == .valid && s?.expires == 100_000 && s?.hasValidToken == true && s?.root == "https://h/arcgis")
        #expect(cache.status(key: key, now: 100_000)?.state == .expired)
        guard case .startFetch(let t2) = cache.acquire(key: key, credential: "gis", now: 100_000, waiter: "b") else {
            Issue.record("expected a fetch")
            return
        }
        _ = cache.complete(t2, with: .failure(TokenError(credential: "gis", message: "down")), now: 100_000)
        s = cache.status(key: key, now: 100_500)
        #expect(s?.state == .failing && s?.retryAt == 101_000 && s?.lastError == "down" && s?.hasValidToken == false)
        #expect(cache.status(key: "other|x", now: 0) == nil)
    }

    @Test func prefetchPlan() {
        func status(_ state: TokenStatus.State, expires: Int64? = nil, retryAt: Int64? = nil) -> TokenStatus {
            TokenStatus(
                credential: "c", root: "r", state: state, expires: expires, issued: 0,
                hasValidToken: state == .valid, lastError: nil, retryAt: retryAt)
        }
        #expect(PrefetchPlan.next(status: nil, refreshMargin: 0, now: 0) == (.fetch, 1000))
        #expect(PrefetchPlan.next(status: status(.refreshing), refreshMargin: 0, now: 0) == (.none, 1000))
        #expect(
            PrefetchPlan.next(status: status(.valid, expires: 60_000), refreshMargin: 6_000, now: 4_000)
                == (.none, 50_000))
        #expect(
            PrefetchPlan.next(status: status(.valid, expires: 60_000), refreshMargin: 6_000, now: 54_000)
                == (.refresh, 1000))
        #expect(PrefetchPlan.next(status: status(.valid), refreshMargin: 0, now: 0) == (.none, nil))
        #expect(
            PrefetchPlan.next(status: status(.failing, retryAt: 8_000), refreshMargin: 0, now: 5_000) == (.none, 3_000))
        #expect(
            PrefetchPlan.next(status: status(.failing, retryAt: 8_000), refreshMargin: 0, now: 8_000) == (.fetch, 1000))
        #expect(PrefetchPlan.next(status: status(.expired), refreshMargin: 0, now: 0) == (.fetch, 1000))
    }

    @Test func readinessNamesEveryProblem() {
        let open = [StatusReport.Listener(address: "127.0.0.1:3128", open: true)]
        let statuses: [String: TokenStatus] = [
            "a|https://h/arcgis": TokenStatus(
                credential: "a", root: "https://h/arcgis", state: .valid, expires: nil,
                issued: 1, hasValidToken: true, lastError: nil, retryAt: nil),
            "b|https://h/arcgis": TokenStatus(
                credential: "b", root: "https://h/arcgis", state: .failing, expires: nil,
                issued: nil, hasValidToken: false, lastError: "invalid credentials", retryAt: 5),
        ]
        let ok = Readiness.evaluate(
            listeners: open, shuttingDown: false,
            prefetch: [("a", "a|https://h/arcgis")]
        ) { statuses[$0] }
        #expect(ok.ready && ok.reasons.isEmpty && ok.json == "{\"ready\":true}\n")
        let bad = Readiness.evaluate(
            listeners: [StatusReport.Listener(address: "x", open: false)], shuttingDown: true,
            prefetch: [("a", "a|https://h/arcgis"), ("b", "b|https://h/arcgis"), ("c", "c|https://h/arcgis")]
        ) { statuses[$0] }
        #expect(!bad.ready)
        #expect(
            bad.reasons == [
                "shutting down", "listener x is not open",
                "credential 'b' has no valid token for https://h/arcgis (failing): invalid credentials",
                "credential 'c' has no token for https://h/arcgis yet",
            ])
        #expect(bad.json.hasPrefix("{\"ready\":false,\"reasons\":[\"shutting down\","))
    }

    @Test func statusPageEscapesEverything() {
        let report = StatusReport(
            version: "1<2", startedAt: "s", uptimeSeconds: 3_725, workers: 4,
            cpus: "1 usable CPU (2 online, cgroup limit 0.50 <CPUs>)", generatedAt: "g", ready: false,
            notReadyBecause: ["<script>alert(1)</script>"], listeners: [], clientConnections: 0, tunnels: 0,
            credentials: [
                StatusReport.Credential(
                    name: "a\"b", type: "arcgis-token", match: ["https://h/<x>"], prefetch: true,
                    tokens: [
                        StatusReport.TokenView(
                            root: "https://h/arcgis", state: "failing", validUntil: nil,
                            expiresInSeconds: nil, lastRefresh: nil, lastError: "bad & worse", nextRetry: "n")
                    ],
                    requestsLast5Min: 1, rejectionsLast5Min: 0, rateLimitedLast5Min: 0, rateLimitedTotal: 0,
                    lastTokenRequest: nil, lastTokenRequestSucceeded: nil, networkAuth: [])
            ],
            interception: nil, lastReload: nil)
        let html = StatusPage.render(report)
        #expect(!html.contains("<script>"))
        #expect(html.contains("&lt;script&gt;"))
        #expect(html.contains("data-name=\"a&quot;b\""))
        #expect(html.contains("https://h/&lt;x&gt;"))
        #expect(html.contains("bad &amp; worse"))
        #expect(html.contains("1h 2m"))
        #expect(html.contains("4 event loops; 1 usable CPU (2 online, cgroup limit 0.50 &lt;CPUs&gt;)"))
        #expect(!html.contains("<script"))
    }

    /// The token cell comes from what the report says of the kind (its token source and settings summary), not from
    /// a list of type names: a kind added later shows its settings without a change to the page.
    @Test func statusPageTokenCellFollowsTheKind() {
        func row(_ type: String, source: String, details: [StatusReport.Detail]) -> StatusReport.Credential {
            var c = StatusReport.Credential(
                name: type, type: type, match: ["https://h/"], prefetch: false, tokens: [], requestsLast5Min: 0,
                rejectionsLast5Min: 0, rateLimitedLast5Min: 0, rateLimitedTotal: 0, lastTokenRequest: nil,
                lastTokenRequestSucceeded: nil, networkAuth: [])
            c.tokenSource = source
            c.details = details
            return c
        }
        let report = StatusReport(
            version: "v", startedAt: "s", uptimeSeconds: 1, workers: 1, cpus: "1", generatedAt: "g", ready: true,
            notReadyBecause: [], listeners: [], clientConnections: 0, tunnels: 0,
            credentials: [
                row("some-new-kind", source: "none", details: [.init(name: "region", value: "eu-<1>")]),
                row("some-fetching-kind", source: "fetched", details: []),
                row("some-fixed-kind", source: "fixed", details: [.init(name: "expires", value: "2027")]),
            ],
            interception: nil, lastReload: nil)
        let html = StatusPage.render(report)
        #expect(html.contains("<div class=\"detail muted\">region: eu-&lt;1&gt;</div>"))
        #expect(html.contains("no token requested yet"))
        #expect(html.contains("<span class=\"ok\">configured</span><div class=\"detail muted\">expires: 2027</div>"))
    }
}
