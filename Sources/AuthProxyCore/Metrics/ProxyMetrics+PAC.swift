import CoreMetrics

/// `upstream_pac`'s figures: whether a PAC file is in force, and how often reading one failed.
extension ProxyMetrics {
    /// A PAC read ended: `loaded` whether a PAC file is in force now (the new one or the last good one),
    /// `failed` whether this read failed. Rare (once per refresh period), so the handles are made per event.
    func pacLoad(loaded: Bool, failed: Bool) {
        CoreMetrics.Gauge(label: "authproxy_pac_loaded", dimensions: [], factory: factory).record(loaded ? 1 : 0)
        // Made on success too, so the series exists (at 0) from the first read.
        let failures = CoreMetrics.Counter(label: "authproxy_pac_load_failures_total", dimensions: [], factory: factory)
        if failed { failures.increment() }
    }
}
