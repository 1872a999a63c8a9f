/// The concurrency caps' series in the Prometheus text format, rendered at scrape time from ``UpstreamLimiter``
/// (which keeps the counts for the status page too): requests open and queued per cap, and the requests refused
/// 503 by cause. Every configured cap is present from the first scrape (at 0).
enum UpstreamLimitMetricsText {
    static func render(_ caps: [UpstreamLimiter.Snapshot]) -> String {
        guard !caps.isEmpty else { return "" }
        func labels(_ s: UpstreamLimiter.Snapshot) -> String {
            "name=\"\(MetricLabels.escaped(s.key.name))\",scope=\"\(s.key.scope.rawValue)\""
        }
        var out = "# HELP authproxy_upstream_open Requests holding a slot of a max_concurrent cap.\n"
        out += "# TYPE authproxy_upstream_open gauge\n"
        for s in caps { out += "authproxy_upstream_open{\(labels(s))} \(s.open)\n" }
        out += "# HELP authproxy_upstream_queued Requests waiting for a slot of a max_concurrent cap.\n"
        out += "# TYPE authproxy_upstream_queued gauge\n"
        for s in caps { out += "authproxy_upstream_queued{\(labels(s))} \(s.queued)\n" }
        out += "# HELP authproxy_upstream_limit_max_concurrent The configured max_concurrent of a cap.\n"
        out += "# TYPE authproxy_upstream_limit_max_concurrent gauge\n"
        for s in caps { out += "authproxy_upstream_limit_max_concurrent{\(labels(s))} \(s.limit.maxConcurrent)\n" }
        out +=
            "# HELP authproxy_upstream_queue_refused_total Requests refused 503 by a max_concurrent cap, by reason.\n"
        out += "# TYPE authproxy_upstream_queue_refused_total counter\n"
        for s in caps {
            for r in UpstreamLimiter.RefusalReason.allCases {
                out +=
                    "authproxy_upstream_queue_refused_total{\(labels(s)),reason=\"\(r.rawValue)\"} \(s.refused[r] ?? 0)\n"
            }
        }
        return out
    }
}
