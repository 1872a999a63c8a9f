import Synchronization
import Tracing

/// A span of the proxy (swift-distributed-tracing's `Span`): its identity is fixed at start; its name, attributes,
/// events and status may change until ``end(at:)``, which hands a ``SpanRecord`` to the exporter once. A span that
/// is not sampled records nothing and is never exported; it still carries the context, so the next hop learns the
/// trace and that it was not sampled.
///
/// Thread-safe: its mutable state is behind a lock (most spans are started and ended on one event loop, a token
/// fetch's on the token service's queue).
final class ProxySpan: Tracing.Span {
    let context: InstrumentationContext
    let spanContext: ProxySpanContext
    let parentSpanID: SpanID?
    let parentIsRemote: Bool
    let kind: SpanRecord.Kind
    let startNanos: UInt64
    let isRecording: Bool
    /// The tracer that started it (its children are started by the same one).
    let tracer: ProxyTracer
    private let exporter: SpanExporter?
    private let state: Mutex<State>

    private struct State {
        var name: String
        var attributes = SpanAttributes()
        var events: [SpanRecord.Event] = []
        var status: SpanStatus? = nil
        var ended = false
    }

    init(
        name: String, context: InstrumentationContext, spanContext: ProxySpanContext, parent: ProxySpanContext?,
        kind: SpanRecord.Kind, startNanos: UInt64, tracer: ProxyTracer, exporter: SpanExporter?
    ) {
        self.tracer = tracer
        self.context = context
        self.spanContext = spanContext
        parentSpanID = parent?.spanID
        parentIsRemote = parent?.isRemote ?? false
        self.kind = kind
        self.startNanos = startNanos
        isRecording = spanContext.sampled && exporter != nil
        self.exporter = exporter
        state = Mutex(State(name: name))
    }

    var operationName: String {
        get { state.withLock { $0.name } }
        set { state.withLock { $0.name = newValue } }
    }

    var attributes: SpanAttributes {
        get { state.withLock { $0.attributes } }
        set {
            guard isRecording else { return }
            state.withLock { $0.attributes = newValue }
        }
    }

    func setStatus(_ status: SpanStatus) {
        guard isRecording else { return }
        state.withLock { s in
            // OTel: Ok is final, and Unset never replaces what was set.
            if s.status?.code == .ok { return }
            s.status = status
        }
    }

    func addEvent(_ event: SpanEvent) {
        guard isRecording else { return }
        let e = SpanRecord.Event(
            name: event.name, timeNanos: event.nanosecondsSinceEpoch, attributes: Self.values(event.attributes))
        state.withLock { $0.events.append(e) }
    }

    func recordError<Instant: TracerInstant>(
        _ error: any Error, attributes: SpanAttributes, at instant: @autoclosure () -> Instant
    ) {
        guard isRecording else { return }
        // Only the error's type: an error's description may quote a URL with its query or a server's answer.
        var a = attributes
        a["exception.type"] = "\(type(of: error))"
        addEvent(SpanEvent(name: "exception", at: instant(), attributes: a))
    }

    func addLink(_ link: SpanLink) {}

    func end<Instant: TracerInstant>(at instant: @autoclosure () -> Instant) {
        guard isRecording else { return }
        let endNanos = instant().nanosecondsSinceEpoch
        guard
            let taken = state.withLock({ s -> State? in
                if s.ended { return nil }
                s.ended = true
                return s
            })
        else { return }
        var r = SpanRecord(
            name: taken.name, kind: kind, traceID: spanContext.traceID, spanID: spanContext.spanID,
            parentSpanID: parentSpanID, traceState: spanContext.traceState, startNanos: startNanos,
            endNanos: max(endNanos, startNanos))
        r.parentIsRemote = parentIsRemote
        r.attributes = Self.values(taken.attributes)
        r.events = taken.events
        if let st = taken.status {
            switch st.code {
            case .ok: r.status = .ok
            case .error:
                r.status = .error
                r.statusMessage = st.message
            }
        }
        exporter?.add(r)
    }

    /// The attributes as OTLP values (a value of a kind OTLP has no scalar for is sent as its text).
    static func values(_ attributes: SpanAttributes) -> [(String, SpanRecord.Value)] {
        var out: [(String, SpanRecord.Value)] = []
        attributes.forEach { key, a in
            switch a {
            case .string(let s): out.append((key, .string(s)))
            case .bool(let b): out.append((key, .bool(b)))
            case .int32(let i): out.append((key, .int(Int64(i))))
            case .int64(let i): out.append((key, .int(i)))
            case .double(let d): out.append((key, .double(d)))
            case .stringArray(let l): out.append((key, .strings(l)))
            case .stringConvertible(let c): out.append((key, .string(c.description)))
            default: out.append((key, .string("\(a)")))
            }
        }
        return out
    }
}
