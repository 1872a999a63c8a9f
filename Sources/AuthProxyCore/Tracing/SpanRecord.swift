/// A finished span as the exporter holds it until it is sent: plain values, no reference to the tracer, so a
/// batch is cheap to keep and to encode off the request path.
struct SpanRecord: Sendable, Equatable {
    enum Kind: UInt8, Sendable {
        case `internal` = 1
        case server = 2
        case client = 3
    }

    /// OTLP's status codes.
    enum StatusCode: UInt8, Sendable {
        case unset = 0
        case ok = 1
        case error = 2
    }

    /// An attribute value, as OTLP's `AnyValue` carries it.
    enum Value: Sendable, Equatable {
        case string(String)
        case bool(Bool)
        case int(Int64)
        case double(Double)
        case strings([String])
    }

    struct Event: Sendable, Equatable {
        var name: String
        var timeNanos: UInt64
        var attributes: [(String, Value)]

        static func == (a: Event, b: Event) -> Bool {
            a.name == b.name && a.timeNanos == b.timeNanos
                && a.attributes.elementsEqual(b.attributes) { $0.0 == $1.0 && $0.1 == $1.1 }
        }
    }

    var name: String
    var kind: Kind
    var traceID: TraceID
    var spanID: SpanID
    var parentSpanID: SpanID?
    /// The parent came from another process (the client's `traceparent`).
    var parentIsRemote = false
    var traceState: String?
    var startNanos: UInt64
    var endNanos: UInt64
    var attributes: [(String, Value)] = []
    var events: [Event] = []
    var status: StatusCode = .unset
    var statusMessage: String? = nil

    static func == (a: SpanRecord, b: SpanRecord) -> Bool {
        a.name == b.name && a.kind == b.kind && a.traceID == b.traceID && a.spanID == b.spanID
            && a.parentSpanID == b.parentSpanID && a.parentIsRemote == b.parentIsRemote
            && a.traceState == b.traceState && a.startNanos == b.startNanos
            && a.endNanos == b.endNanos && a.events == b.events && a.status == b.status
            && a.statusMessage == b.statusMessage
            && a.attributes.elementsEqual(b.attributes) { $0.0 == $1.0 && $0.1 == $1.1 }
    }
}
