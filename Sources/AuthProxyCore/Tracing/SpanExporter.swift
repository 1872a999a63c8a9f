import Dispatch
import Logging
import Synchronization

/// Batches finished spans and sends them to the OTLP/HTTP endpoint off the request path: a span is appended under
/// a lock (the only work on the event loop); the export runs on the exporter's own queue with its own libcurl multi
/// handle, one request at a time, every ``TracingConfig/scheduleDelayMillis`` or as soon as a batch is full.
///
/// Memory is bounded: at most ``TracingConfig/maxQueueSize`` spans wait; past that a span is dropped and counted
/// (reported in the log at most once a minute, with the count). A batch the endpoint refuses or cannot take is
/// dropped and counted the same way: no retry, so a collector that is down costs a bounded amount. Both show in
/// `authproxy_trace_spans_dropped_total{reason}` (``ProxyMetrics/spansDropped(_:count:)``).
///
/// The exporter's requests go straight to the endpoint: never through the proxy's listeners, never through a parent
/// proxy or the `http_proxy` environment (``CurlTransfer`` sets no proxy), and they are not traced.
///
/// Ownership: `pending` and the counters are under `state`'s lock (any thread); `multi`, `inFlight` and the timer
/// only on `queue`.
final class SpanExporter: @unchecked Sendable {
    let config: TracingConfig
    let queue = ProxyQueue.make("authproxy.tracing")
    let logger: Logger
    private let multi: CurlMulti
    private var timer: (any DispatchSourceTimer)?
    private var inFlight = false
    /// An export was asked for (the timer, a full batch, a flush) while one was in flight: the next goes as soon
    /// as that one ends. Otherwise the spans that came meanwhile wait for the timer or a full batch, so a busy
    /// proxy sends a few large requests rather than one per handful of spans (each costs a libcurl transfer).
    private var wanted = false
    /// Called when an export ends and nothing else is pending (``flush(timeoutMillis:)``'s waiters).
    private var idleWaiters: [() -> Void] = []
    private let resource: [(String, SpanRecord.Value)]

    private struct State {
        var pending: [SpanRecord] = []
        var dropped = 0
        var failed = 0
        var exported = 0
        /// An export has been asked for and not yet begun (at most one hop per batch).
        var kicked = false
        var lastReport: UInt64 = 0
    }
    private let state = Mutex(State())

    init(config: TracingConfig, logger: Logger) {
        self.config = config
        self.logger = logger
        multi = CurlMulti(queue: queue)
        var r: [(String, SpanRecord.Value)] = [
            ("service.name", .string(config.serviceName)),
            ("service.version", .string(AuthProxyVersion.string)),
            ("telemetry.sdk.name", .string("authproxy")),
            ("telemetry.sdk.language", .string("swift")),
        ]
        for a in config.resourceAttributes where a.name != "service.version" { r.append((a.name, .string(a.value))) }
        resource = r
    }

    /// Starts the periodic export.
    func start() {
        let t = DispatchSource.makeTimerSource(queue: queue)
        let every = DispatchTimeInterval.milliseconds(config.scheduleDelayMillis)
        t.schedule(deadline: .now() + every, repeating: every, leeway: .milliseconds(10))
        t.setEventHandler { [weak self] in self?.exportNext() }
        queue.sync { timer = t }
        t.resume()
    }

    /// Takes a finished span (any thread). Never blocks beyond the lock; a full queue drops it.
    func add(_ span: SpanRecord) {
        var full = false
        let kick = state.withLock { s -> Bool in
            guard s.pending.count < config.maxQueueSize else {
                s.dropped += 1
                full = true
                return false
            }
            s.pending.append(span)
            guard s.pending.count >= config.maxExportBatchSize, !s.kicked else { return false }
            s.kicked = true
            return true
        }
        if full { ProxyMetrics.active?.spansDropped(.queueFull, count: 1) }
        if kick { queue.async { [self] in exportNext() } }
    }

    /// Counts so far: spans exported, dropped (queue full), failed (refused or unreachable endpoint).
    var counts: (exported: Int, dropped: Int, failed: Int) {
        state.withLock { ($0.exported, $0.dropped, $0.failed) }
    }

    /// Sends what is pending, batch by batch, and waits for it for at most `timeoutMillis` (shutdown). Not on
    /// `queue`.
    func flush(timeoutMillis: Int) {
        dispatchPrecondition(condition: .notOnQueue(queue))
        let done = DispatchSemaphore(value: 0)
        queue.async { [self] in
            idleWaiters.append { done.signal() }
            exportNext()
        }
        _ = done.wait(timeout: .now() + .milliseconds(timeoutMillis))
    }

    /// On `queue`: sends the next batch unless one is in flight.
    private func exportNext() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !inFlight else {
            wanted = true
            return
        }
        wanted = false
        let batch = state.withLock { s -> [SpanRecord] in
            s.kicked = false
            let n = min(s.pending.count, config.maxExportBatchSize)
            // All of it (the usual case): taken whole rather than copied record by record.
            if n == s.pending.count {
                let all = s.pending
                s.pending = []
                return all
            }
            let b = Array(s.pending.prefix(n))
            s.pending.removeFirst(n)
            return b
        }
        reportDrops()
        guard !batch.isEmpty else {
            let waiters = idleWaiters
            idleWaiters = []
            for w in waiters { w() }
            return
        }
        inFlight = true
        let body = OTLPEncoder.exportRequest(
            spans: batch, resource: resource, scopeName: "authproxy", scopeVersion: AuthProxyVersion.string)
        let post = OTLPPost(
            multi: multi, url: config.endpoint, body: body, headers: config.headers,
            timeoutMillis: config.exportTimeoutMillis, trust: config.trust
        ) { [self] outcome in
            inFlight = false
            switch outcome {
            case .success:
                state.withLock { $0.exported += batch.count }
                ProxyMetrics.active?.spansExported(count: batch.count)
            case .failure(let why):
                ProxyMetrics.active?.spansDropped(.exportFailed, count: batch.count)
                let total = state.withLock { s -> Int in
                    s.failed += batch.count
                    return s.failed
                }
                logger.warning(
                    "trace export failed: spans dropped",
                    metadata: [
                        "endpoint": "\(config.redactedEndpoint)", "cause": "\(why)", "spans": "\(batch.count)",
                        "failed_total": "\(total)",
                    ])
            }
            if wanted || !idleWaiters.isEmpty { exportNext() }
        }
        post.start()
    }

    /// A line when spans were dropped because the queue was full, at most once a minute.
    private func reportDrops() {
        let now = DispatchTime.now().uptimeNanoseconds
        let dropped = state.withLock { s -> Int? in
            guard s.dropped > 0, now &- s.lastReport >= 60_000_000_000 || s.lastReport == 0 else { return nil }
            s.lastReport = now
            return s.dropped
        }
        if let dropped {
            logger.warning(
                "trace queue full: spans dropped",
                metadata: [
                    "dropped_total": "\(dropped)", "max_queue_size": "\(config.maxQueueSize)",
                    "hint": "the endpoint does not keep up, or lower the sampling ratio",
                ])
        }
    }

    /// Stops the timer (after the last flush) and the libcurl handle.
    func stop() {
        queue.sync {
            timer?.cancel()
            timer = nil
            multi.tearDown()
        }
    }
}
