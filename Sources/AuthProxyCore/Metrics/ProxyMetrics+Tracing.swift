import CoreMetrics

/// The trace exporter's figures: spans sent, and spans lost (the queue was full, or the endpoint refused or could
/// not take their batch), so a collector that does not keep up shows before anyone looks for missing traces.
extension ProxyMetrics {
    enum SpanDrop: String {
        /// `max_queue_size` spans were waiting for export.
        case queueFull = "queue_full"
        /// The batch was refused (not 2xx) or could not be sent (unreachable, timeout).
        case exportFailed = "export_failed"
    }

    func spansDropped(_ reason: SpanDrop, count: Int) {
        CoreMetrics.Counter(
            label: "authproxy_trace_spans_dropped_total", dimensions: [("reason", reason.rawValue)], factory: factory
        )
        .increment(by: count)
    }

    func spansExported(count: Int) {
        CoreMetrics.Counter(label: "authproxy_trace_spans_exported_total", dimensions: [], factory: factory)
            .increment(by: count)
    }
}
