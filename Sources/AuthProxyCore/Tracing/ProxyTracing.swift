import Logging
import Tracing

/// The process's tracer, when tracing is configured. Read on every request (one load and a nil check: tracing off
/// costs nothing else); written once at start, before any event loop runs, and at exit.
enum ProxyTracing {
    nonisolated(unsafe) static private(set) var active: ProxyTracer?
    nonisolated(unsafe) static private var exporter: SpanExporter?

    /// Sets up the exporter and the tracer for `config` and bootstraps swift-distributed-tracing's
    /// `InstrumentationSystem` with it (once per process: a second call does nothing).
    static func bootstrap(_ config: TracingConfig, logger: Logger) {
        guard active == nil else { return }
        let e = SpanExporter(config: config, logger: logger)
        e.start()
        let t = ProxyTracer(sampler: config.sampler, exporter: e)
        exporter = e
        active = t
        InstrumentationSystem.bootstrap(t)
        logger.notice(
            "tracing on: OTLP/HTTP export",
            metadata: [
                "endpoint": "\(config.redactedEndpoint)", "service_name": "\(config.serviceName)",
                "sampler": "\(config.samplerDescription)",
            ])
    }

    /// Shutdown: what is pending goes out, for at most `timeoutMillis`.
    static func flush(timeoutMillis: Int) {
        guard let e = exporter else { return }
        e.flush(timeoutMillis: timeoutMillis)
        let c = e.counts
        if c.dropped > 0 || c.failed > 0 {
            e.logger.warning(
                "spans not exported", metadata: ["dropped_queue_full": "\(c.dropped)", "export_failed": "\(c.failed)"])
        }
    }

    /// Starts a span (the proxy's own helper: no `#function`/`#fileID` strings per span).
    static func start(
        _ tracer: ProxyTracer, _ name: String, parent: InstrumentationContext, kind: SpanKind = .internal
    ) -> ProxySpan {
        tracer.startSpan(
            name, context: parent, ofKind: kind, at: DefaultTracerClock.now, function: "", file: "", line: 0)
    }
}
