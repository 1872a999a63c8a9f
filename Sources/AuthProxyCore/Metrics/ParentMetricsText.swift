/// The parent proxies' series in the Prometheus text format, rendered at scrape time from ``ParentHealth`` (which
/// keeps the counts for the status page too, so they are not counted twice): requests sent to each parent,
/// failures by cause, and whether it is in backoff now. Every cause is present from the first scrape (at 0).
enum ParentMetricsText {
    static func render(_ parents: [ParentHealth.Snapshot]) -> String {
        guard !parents.isEmpty else { return "" }
        var out = "# HELP authproxy_parent_requests_total Requests, tunnels and token fetches sent to a parent proxy.\n"
        out += "# TYPE authproxy_parent_requests_total counter\n"
        for p in parents {
            out +=
                "authproxy_parent_requests_total{parent=\"\(MetricLabels.escaped(p.parent.url))\"} \(p.stats.requests)\n"
        }
        out += "# HELP authproxy_parent_failures_total Failures at a parent proxy, by cause.\n"
        out += "# TYPE authproxy_parent_failures_total counter\n"
        for p in parents {
            for cause in ParentFailover.Cause.allCases {
                out +=
                    "authproxy_parent_failures_total{cause=\"\(cause.rawValue)\",parent=\"\(MetricLabels.escaped(p.parent.url))\"} \(p.stats.failures[cause] ?? 0)\n"
            }
        }
        out += "# HELP authproxy_parent_backoff 1 while a parent proxy is skipped after a failure.\n"
        out += "# TYPE authproxy_parent_backoff gauge\n"
        for p in parents {
            out += "authproxy_parent_backoff{parent=\"\(MetricLabels.escaped(p.parent.url))\"} \(p.inBackoff ? 1 : 0)\n"
        }
        return out
    }
}
