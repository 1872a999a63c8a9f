/// Where and how spans are exported (`[tracing]`, or the standard `OTEL_*` environment variables): see
/// docs/operations.md, "Tracing". nil in ``ProxyConfig/tracing``: tracing is off and costs nothing.
public struct TracingConfig: Sendable, Equatable {
    /// The full OTLP/HTTP traces URL the batches are POSTed to (`…/v1/traces`).
    public var endpoint: String
    /// Fields sent with every export (an API key of the tracing backend): secrets, never logged or shown.
    public var headers: [Header] = []
    public var serviceName: String = "authproxy"
    /// `OTEL_RESOURCE_ATTRIBUTES` (`service.name` is ``serviceName``'s).
    public var resourceAttributes: [Header] = []
    var sampler: TraceSampler = .parentBased(root: .alwaysOn)
    /// Spans waiting for export at most; more are dropped and counted (`OTEL_BSP_MAX_QUEUE_SIZE`).
    public var maxQueueSize = 2048
    /// Spans per export request at most (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`).
    public var maxExportBatchSize = 512
    /// The longest a span waits before its batch goes (`OTEL_BSP_SCHEDULE_DELAY`, milliseconds).
    public var scheduleDelayMillis = 5000
    /// One export request's limit (`OTEL_EXPORTER_OTLP_TIMEOUT`, milliseconds).
    public var exportTimeoutMillis = 10_000
    /// CA certificates (PEM) trusted for an `https://` endpoint besides the system's (`ca_file`,
    /// `OTEL_EXPORTER_OTLP_CERTIFICATE`): the file's path and its contents as read at load.
    public var caFile: String? = nil
    var caBundle: [UInt8]? = nil

    /// What the export's TLS trusts: nil, the system CAs only.
    var trust: ServerTrustSettings? {
        caFile.map { ServerTrustSettings(caFile: $0, pinnedPublicKey: nil, insecure: false, caBundle: caBundle) }
    }

    public struct Header: Sendable, Equatable {
        public var name: String
        public var value: String
    }

    public init(endpoint: String) {
        self.endpoint = endpoint
    }

    /// The sampler as configured, for the startup log line.
    public var samplerDescription: String { sampler.description }

    /// The endpoint without a user, password or query (for logs).
    public var redactedEndpoint: String {
        guard let u = HTTPURL.parse(endpoint) else { return "(invalid)" }
        return "\(u.target.origin)\(u.target.path)"
    }
}
