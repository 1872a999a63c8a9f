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
        var attributes = SpanAttributeList()
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

    /// The `Span` protocol's view of the attributes; the proxy's own call sites use ``setAttribute(_:_:)`` and
    /// ``setAttributes(_:)``, which skip building a `SpanAttributes` dictionary.
    var attributes: SpanAttributes {
        get { state.withLock { $0.attributes.spanAttributes } }
        set {
            guard isRecording else { return }
            let list = SpanAttributeList(newValue)
            state.withLock { $0.attributes = list }
        }
    }

    /// Sets one attribute (as `attributes[key] = value`); nothing when not recording.
    func setAttribute(_ key: String, _ value: SpanRecord.Value) {
        guard isRecording else { return }
        state.withLock { $0.attributes.set(key, value) }
    }

    func setAttribute(_ key: String, _ value: String) { setAttribute(key, .string(value)) }
    func setAttribute(_ key: String, _ value: Int) { setAttribute(key, .int(Int64(value))) }
    func setAttribute(_ key: String, _ value: Bool) { setAttribute(key, .bool(value)) }

    /// Replaces all attributes (as `attributes = list`); nothing when not recording.
    func setAttributes(_ list: SpanAttributeList) {
        guard isRecording else { return }
        state.withLock { $0.attributes = list }
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
            name: event.name, timeNanos: event.nanosecondsSinceEpoch,
            attributes: SpanAttributeList(event.attributes).items)
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

    /// Ends the span without exporting it: it turned out to stand for nothing that happened (its context may have
    /// been seen by no one else: no child, nothing sent with it).
    func discard() {
        state.withLock { $0.ended = true }
    }

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
        r.attributes = taken.attributes.items
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
}
