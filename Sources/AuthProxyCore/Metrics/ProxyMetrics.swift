import CoreMetrics
import Dispatch
import Prometheus
import Synchronization

/// What the proxy counts for `/metrics` and the status page: swift-metrics handles (`Counter`, `Meter`, `Timer`,
/// `Gauge`) made by a ``PrometheusMetricsFactory`` over this process's own ``PrometheusCollectorRegistry``, which
/// renders the Prometheus text format; plus, per credential, the last five minutes of requests and rejections,
/// network-authentication outcomes and rate-limit hits (``CredentialActivity``).
///
/// **One per process, on only with `[admin]`.** ``enable()`` installs it before the listeners start; without an
/// admin listener ``active`` stays nil and every recording site is a nil check, so the proxy pays nothing for
/// metrics nobody can read. Recording costs an atomic add per counter (handles are made once and cached, see
/// ``RequestCounters``), a short lock per histogram and one per credential activity update.
///
/// Ownership: immutable after `init` apart from the registry and handles (atomics/locks inside) and `activity`
/// (a `Mutex`); any thread may record.
public final class ProxyMetrics: Sendable {
    /// Set once by ``enable()`` before any event loop runs, read everywhere afterwards.
    nonisolated(unsafe) static private(set) var active: ProxyMetrics?

    let registry = PrometheusCollectorRegistry()
    let factory: PrometheusMetricsFactory
    /// Wall-clock start (milliseconds since the epoch), for the status page's uptime.
    let startedAt: Int64

    let clientConnections: CoreMetrics.Meter
    let tunnels: CoreMetrics.Meter
    /// WebSockets being relayed now (after their `101`), kept up to date as they open and end.
    let webSockets: CoreMetrics.Meter
    let bytesUpstream: CoreMetrics.Counter
    let bytesDownstream: CoreMetrics.Counter
    let certificatesMinted: CoreMetrics.Counter
    let durationTotal: CoreMetrics.Timer
    let durationFirstByte: CoreMetrics.Timer
    private let denied: [MetricLabels.DeniedReason: CoreMetrics.Counter]
    private let upstreamErrors: [MetricLabels.UpstreamCause: CoreMetrics.Counter]
    let activity = Mutex(CredentialActivity())

    /// Request-duration buckets (seconds): proxied requests on a LAN take ~0.2 ms, token-refreshing ones ~100 ms,
    /// slow map exports tens of seconds.
    static let durationBuckets: [Duration] = [
        .microseconds(500), .milliseconds(1), .milliseconds(2.5), .milliseconds(5), .milliseconds(10),
        .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500),
        .seconds(1), .seconds(2.5), .seconds(5), .seconds(10), .seconds(30), .seconds(60),
    ]

    init(now: Int64 = nowMillis()) {
        var f = PrometheusMetricsFactory(registry: registry)
        f.durationHistogramBuckets["authproxy_request_duration_seconds"] = Self.durationBuckets
        factory = f
        startedAt = now
        clientConnections = CoreMetrics.Meter(label: "authproxy_client_connections", dimensions: [], factory: f)
        tunnels = CoreMetrics.Meter(label: "authproxy_tunnels", dimensions: [], factory: f)
        webSockets = CoreMetrics.Meter(label: "authproxy_websockets_open", dimensions: [], factory: f)
        bytesUpstream = CoreMetrics.Counter(
            label: "authproxy_bytes_total", dimensions: [("direction", "upstream")], factory: f)
        bytesDownstream = CoreMetrics.Counter(
            label: "authproxy_bytes_total", dimensions: [("direction", "downstream")], factory: f)
        certificatesMinted = CoreMetrics.Counter(
            label: "authproxy_certificates_minted_total", dimensions: [], factory: f)
        durationTotal = CoreMetrics.Timer(
            label: "authproxy_request_duration_seconds", dimensions: [("phase", "total")],
            factory: f)
        durationFirstByte = CoreMetrics.Timer(
            label: "authproxy_request_duration_seconds",
            dimensions: [("phase", "upstream_first_byte")], factory: f)
        var denied: [MetricLabels.DeniedReason: CoreMetrics.Counter] = [:]
        for r in MetricLabels.DeniedReason.allCases {
            denied[r] = CoreMetrics.Counter(
                label: "authproxy_denied_total", dimensions: [("reason", r.rawValue)], factory: f)
        }
        self.denied = denied
        var errors: [MetricLabels.UpstreamCause: CoreMetrics.Counter] = [:]
        for c in MetricLabels.UpstreamCause.allCases {
            errors[c] = CoreMetrics.Counter(
                label: "authproxy_upstream_errors_total", dimensions: [("cause", c.rawValue)], factory: f)
        }
        upstreamErrors = errors
        // Present from the start (at 0) so dashboards and alerts see the series before the first event.
        clientConnections.set(0)
        tunnels.set(0)
        webSockets.set(0)
    }

    /// Turns metrics on for this process (once; later calls return the same instance).
    @discardableResult
    public static func enable() -> ProxyMetrics {
        if let m = active { return m }
        let m = ProxyMetrics()
        active = m
        return m
    }

    /// The Prometheus text exposition of every metric.
    public func exposition() -> [UInt8] { registry.emitToBuffer() }

    // MARK: - recording

    func denied(_ reason: MetricLabels.DeniedReason) { denied[reason]?.increment() }

    func upstreamError(_ cause: MetricLabels.UpstreamCause) { upstreamErrors[cause]?.increment() }

    func webSocketOpened() { webSockets.increment() }
    func webSocketClosed() { webSockets.decrement() }

    /// A WebSocket handshake ended: `result` is `upgraded` (a `101`, now relayed) or `refused` (any other answer).
    /// Rare next to requests, so the handle is made per event.
    func webSocketUpgrade(credential: String, result: String) {
        CoreMetrics.Counter(
            label: "authproxy_websocket_upgrades_total",
            dimensions: [("credential", credential), ("result", result)], factory: factory
        ).increment()
    }

    /// A token request for `credential` finished (`result`: `success` or `failure`).
    func tokenRequest(credential: String, success: Bool) {
        CoreMetrics.Counter(
            label: "authproxy_token_requests_total",
            dimensions: [("credential", credential), ("result", success ? "success" : "failure")], factory: factory
        )
        .increment()
        activity.withLock { $0.tokenRequest(credential: credential, success: success, now: nowMillis()) }
    }

    /// A token was obtained for `credential` at server root `root`: its expiry time (nil: does not expire).
    func tokenExpiry(credential: String, root: String, expires: Int64?) {
        guard let expires else { return }
        CoreMetrics.Gauge(
            label: "authproxy_token_expiry_timestamp_seconds",
            dimensions: [("credential", credential), ("root", root)],
            factory: factory
        ).record(Double(expires) / 1000)
    }

    /// The upstream answered 498/499 (in any form) to a request carrying `credential`'s token.
    func tokenRejected(credential: String) {
        CoreMetrics.Counter(
            label: "authproxy_token_rejections_total", dimensions: [("credential", credential)], factory: factory
        )
        .increment()
        activity.withLock { $0.rejected(credential: credential, now: nowMillis()) }
    }

    /// The upstream rejected the key in `slot` of the `api-key` credential `credential` (``APIKeySlotBook``). Rare,
    /// so the handle is made per event.
    func apiKeyRejected(credential: String, slot: Int) {
        CoreMetrics.Counter(
            label: "authproxy_api_key_rejections_total", dimensions: [("credential", credential), ("slot", "\(slot)")],
            factory: factory
        ).increment()
    }

    /// A request retried with a fresh token ended: `success` when the retry's answer was not a rejection.
    func retry(credential: String, result: String) {
        CoreMetrics.Counter(
            label: "authproxy_retries_total", dimensions: [("credential", credential), ("result", result)],
            factory: factory
        ).increment()
    }

    /// An upstream retry (``RetryPolicy``) for `cause` ended: `success` when the attempt it made was answered
    /// without a retriable failure, `failure` when it failed again, `budget_exhausted` when the host's
    /// ``RetryBudget`` refused it. Rare next to requests, so the handle is made per event.
    func upstreamRetry(cause: RetryPolicy.Cause, result: String) {
        CoreMetrics.Counter(
            label: "authproxy_upstream_retries_total",
            dimensions: [("cause", cause.rawValue), ("result", result)], factory: factory
        ).increment()
    }

    /// An ArcGIS REST `GET` went upstream as a `POST` form (``GetAsPost``), for `cause`.
    func getAsPost(_ cause: GetAsPost.Cause) {
        CoreMetrics.Counter(
            label: "authproxy_get_as_post_total", dimensions: [("cause", cause.rawValue)],
            factory: factory
        ).increment()
    }

    /// An upstream challenge was answered with `credential` using `scheme`; `success` unless the final answer was
    /// still 401.
    func networkAuth(credential: String, scheme: String, success: Bool) {
        CoreMetrics.Counter(
            label: "authproxy_network_auth_total",
            dimensions: [("credential", credential), ("scheme", scheme), ("result", success ? "success" : "failure")],
            factory: factory
        ).increment()
        activity.withLock { $0.networkAuth(credential: credential, scheme: scheme, success: success, now: nowMillis()) }
    }

    /// A request refused 429 by a credential's `rate_limit` (`reason` "rate") or `daily_quota` ("daily_quota").
    func rateLimited(credential: String, reason: String = "rate") {
        CoreMetrics.Counter(
            label: "authproxy_rate_limited_total", dimensions: [("credential", credential), ("reason", reason)],
            factory: factory
        )
        .increment()
        activity.withLock { $0.rateLimited(credential: credential, now: nowMillis()) }
    }

    /// A configuration reload was applied or rejected.
    func reload(applied: Bool) {
        CoreMetrics.Counter(
            label: "authproxy_config_reloads_total", dimensions: [("result", applied ? "applied" : "rejected")],
            factory: factory
        ).increment()
    }
}

/// The `authproxy_requests_total` handles one event loop has used, by label set: made once through the factory
/// (which takes the registry's lock), then a dictionary lookup and an atomic add per request. Confined to its
/// loop's queue.
struct RequestCounters {
    struct Key: Hashable {
        var credential: String
        var method: UInt8
        var statusClass: UInt8
    }

    private var handles: [Key: CoreMetrics.Counter] = [:]

    mutating func increment(credential: String, method: String, status: Int, metrics: ProxyMetrics) {
        let statusClass = MetricLabels.statusClass(status)
        let key = Key(
            credential: credential, method: UInt8(MetricLabels.methodIndex(method)),
            statusClass: UInt8(status / 100))
        if let c = handles[key] {
            c.increment()
            return
        }
        let c = CoreMetrics.Counter(
            label: "authproxy_requests_total",
            dimensions: [
                ("credential", credential), ("method", MetricLabels.methodName(index: Int(key.method))),
                ("status_class", statusClass),
            ],
            factory: metrics.factory)
        handles[key] = c
        c.increment()
    }
}
