import Testing

@testable import AuthProxyCore

/// The status page's limits table shows what `/status.json`'s `limits` holds, escaped.
@Suite struct StatusPageLimitsTests {
    func report(_ limits: [StatusReport.Limit]) -> StatusReport {
        var r = StatusReport(
            version: "v", startedAt: "s", uptimeSeconds: 1, workers: 1, cpus: "1", generatedAt: "g", ready: true,
            notReadyBecause: [], listeners: [], clientConnections: 0, tunnels: 0, credentials: [], interception: nil,
            lastReload: nil)
        r.limits = limits
        return r
    }

    @Test func everyLimitIsARowWithItsFigures() {
        var cap = StatusReport.Limit(scope: "host", name: "gis.example:443")
        cap.maxConcurrent = 4
        cap.maxQueued = 100
        cap.open = 3
        cap.queued = 7
        cap.refusedQueueFull = 2
        cap.refusedQueueTimeout = 1
        var fleet = StatusReport.Limit(scope: "credential", name: "svc<1>")
        fleet.rateLimit = "30/60s"
        fleet.rateLimitScope = "credential"
        fleet.fleet = "share"
        fleet.rateLimitUsed = 12
        fleet.rateLimitShare = 10
        fleet.dailyQuota = 500
        fleet.dailyQuotaUsed = 42
        fleet.dailyQuotaShare = 166
        let html = StatusPage.render(report([cap, fleet]))
        #expect(html.contains("<table id=\"limits\">"))
        #expect(html.contains("<td>3 open of 4, 7 queued (at most 100)</td><td>2 / 1</td><td>-</td><td>-</td>"))
        #expect(html.contains("data-name=\"svc&lt;1&gt;\""))
        #expect(
            html.contains(
                "30/60s per credential <span class=\"bad\">this replica's share</span>, 12 used this window, share 10"))
        #expect(html.contains("42 of 500 used today <span class=\"bad\">this replica's share</span>, share 166"))
    }

    @Test func noLimitNoTable() {
        #expect(!StatusPage.render(report([])).contains("id=\"limits\""))
    }
}
