import Tracing

/// What a span passes on to its children and to the next hop: the W3C trace context of one span. Carried in an
/// `InstrumentationContext` (swift-distributed-tracing's context) under ``ProxySpanContextKey``.
struct ProxySpanContext: Sendable, Equatable {
    var traceID: TraceID
    var spanID: SpanID
    var sampled: Bool
    /// The client's `tracestate`, passed on unchanged (the proxy adds no entry of its own).
    var traceState: String?
    /// Extracted from a request (a remote parent), not a span of this process.
    var isRemote: Bool

    /// The `traceparent` value for a request sent on behalf of this span.
    var traceparent: String {
        TraceParent(traceID: traceID, spanID: spanID, flags: sampled ? 1 : 0).header
    }
}

enum ProxySpanContextKey: InstrumentationContextKey {
    typealias Value = ProxySpanContext
    static var nameOverride: String? { "authproxy-span-context" }
}

extension InstrumentationContext {
    /// The span context this context carries, if any.
    var proxySpan: ProxySpanContext? {
        get { self[ProxySpanContextKey.self] }
        set { self[ProxySpanContextKey.self] = newValue }
    }
}

/// `traceparent`/`tracestate` read from and written into ``HTTPHeaders`` (W3C Trace Context's carrier).
struct HTTPHeadersExtractor: Extractor {
    func extract(key: String, from carrier: HTTPHeaders) -> String? {
        let values = carrier.values(key)
        // Two traceparent fields are invalid (W3C §3.2.1: treated as none); tracestate fields combine.
        if key == "traceparent" { return values.count == 1 ? values[0] : nil }
        return values.isEmpty ? nil : values.joined(separator: ",")
    }
}

struct HTTPHeadersInjector: Injector {
    func inject(_ value: String, forKey key: String, into carrier: inout HTTPHeaders) {
        carrier.setInjected(name: key, value: value)
    }
}
