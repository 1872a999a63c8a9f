import Tracing

/// The proxy's `Tracer` (swift-distributed-tracing): starts ``ProxySpan``s under the configured sampler and hands
/// finished ones to a ``SpanExporter``; propagates W3C `traceparent`/`tracestate`. Bootstrapped into
/// `InstrumentationSystem` once at start when tracing is configured (``ProxyTracing/bootstrap(_:logger:)``).
final class ProxyTracer: Tracer {
    typealias Span = ProxySpan

    let sampler: TraceSampler
    let exporter: SpanExporter?

    init(sampler: TraceSampler, exporter: SpanExporter?) {
        self.sampler = sampler
        self.exporter = exporter
    }

    func startSpan<Instant: TracerInstant>(
        _ operationName: String, context: @autoclosure () -> InstrumentationContext, ofKind kind: SpanKind,
        at instant: @autoclosure () -> Instant, function: String, file fileID: String, line: UInt
    ) -> ProxySpan {
        var ctx = context()
        let parent = ctx.proxySpan
        let traceID = parent?.traceID ?? TraceID.random()
        let sampled = sampler.samples(traceID: traceID, parentSampled: parent?.sampled)
        let own = ProxySpanContext(
            traceID: traceID, spanID: SpanID.random(), sampled: sampled, traceState: parent?.traceState,
            isRemote: false)
        ctx.proxySpan = own
        let k: SpanRecord.Kind
        switch kind {
        case .server: k = .server
        case .client: k = .client
        default: k = .internal
        }
        return ProxySpan(
            name: operationName, context: ctx, spanContext: own, parent: parent, kind: k,
            startNanos: sampled ? instant().nanosecondsSinceEpoch : 0, tracer: self, exporter: exporter)
    }

    func forceFlush() {
        exporter?.flush(timeoutMillis: 5000)
    }

    func extract<Carrier, Extract: Extractor>(
        _ carrier: Carrier, into context: inout InstrumentationContext, using extractor: Extract
    ) where Extract.Carrier == Carrier {
        guard let value = extractor.extract(key: "traceparent", from: carrier),
            let tp = TraceParent.parse(value)
        else { return }
        var state = extractor.extract(key: "tracestate", from: carrier)
        // W3C §3.3.1.1: at most 32 list members, and a vendor may drop the value when it is too long: 512 bytes kept.
        if let s = state, s.utf8.count > 512 { state = nil }
        context.proxySpan = ProxySpanContext(
            traceID: tp.traceID, spanID: tp.spanID, sampled: tp.sampled, traceState: state, isRemote: true)
    }

    func inject<Carrier, Inject: Injector>(
        _ context: InstrumentationContext, into carrier: inout Carrier, using injector: Inject
    ) where Inject.Carrier == Carrier {
        guard let s = context.proxySpan else { return }
        injector.inject(s.traceparent, forKey: "traceparent", into: &carrier)
        if let state = s.traceState, !state.isEmpty {
            injector.inject(state, forKey: "tracestate", into: &carrier)
        }
    }
}
