/// The protobuf binary encoding of an OTLP `ExportTraceServiceRequest`
/// (opentelemetry-proto `collector/trace/v1/trace_service.proto`, `trace/v1/trace.proto`,
/// `common/v1/common.proto`, `resource/v1/resource.proto`), written by hand: the proxy sends one message type and
/// receives none, which does not justify a protobuf runtime and code generator in the build. Pure.
///
/// Field numbers used (all others are left out, which protobuf reads as their defaults):
/// - ExportTraceServiceRequest: resource_spans = 1
/// - ResourceSpans: resource = 1, scope_spans = 2; Resource: attributes = 1
/// - ScopeSpans: scope = 1, spans = 2; InstrumentationScope: name = 1, version = 2
/// - Span: trace_id = 1, span_id = 2, trace_state = 3, parent_span_id = 4, name = 5, kind = 6,
///   start_time_unix_nano = 7 (fixed64), end_time_unix_nano = 8 (fixed64), attributes = 9, events = 11,
///   status = 15, flags = 16 (fixed32)
/// - Event: time_unix_nano = 1 (fixed64), name = 2, attributes = 3
/// - Status: message = 2, code = 3
/// - KeyValue: key = 1, value = 2; AnyValue: string = 1, bool = 2, int = 3, double = 4 (fixed64), array = 5;
///   ArrayValue: values = 1
enum OTLPEncoder {
    /// One request holding `spans`, under one resource (`resource` attributes: `service.name` and the like) and one
    /// instrumentation scope.
    static func exportRequest(
        spans: [SpanRecord], resource: [(String, SpanRecord.Value)], scopeName: String, scopeVersion: String
    ) -> [UInt8] {
        var scope = ProtobufWriter()
        scope.string(1, scopeName)
        scope.string(2, scopeVersion)
        var scopeSpans = ProtobufWriter()
        scopeSpans.message(1, scope)
        for s in spans { scopeSpans.message(2, span(s)) }
        var res = ProtobufWriter()
        for (k, v) in resource { res.message(1, keyValue(k, v)) }
        var resourceSpans = ProtobufWriter()
        resourceSpans.message(1, res)
        resourceSpans.message(2, scopeSpans)
        var request = ProtobufWriter()
        request.message(1, resourceSpans)
        return request.bytes
    }

    static func span(_ s: SpanRecord) -> ProtobufWriter {
        var w = ProtobufWriter()
        w.bytesField(1, s.traceID.bytes)
        w.bytesField(2, s.spanID.bytes)
        if let ts = s.traceState, !ts.isEmpty { w.string(3, ts) }
        if let p = s.parentSpanID { w.bytesField(4, p.bytes) }
        w.string(5, s.name)
        w.varintField(6, UInt64(s.kind.rawValue))
        w.fixed64(7, s.startNanos)
        w.fixed64(8, s.endNanos)
        for (k, v) in s.attributes { w.message(9, keyValue(k, v)) }
        for e in s.events {
            var ev = ProtobufWriter()
            ev.fixed64(1, e.timeNanos)
            ev.string(2, e.name)
            for (k, v) in e.attributes { ev.message(3, keyValue(k, v)) }
            w.message(11, ev)
        }
        if s.status != .unset || s.statusMessage != nil {
            var st = ProtobufWriter()
            if let m = s.statusMessage { st.string(2, m) }
            if s.status != .unset { st.varintField(3, UInt64(s.status.rawValue)) }
            w.message(15, st)
        }
        // Bits 0-7: the W3C flags (sampled: only sampled spans are exported); bit 8: whether the parent is remote
        // is known, bit 9: it is.
        w.fixed32(16, 0x101 | (s.parentIsRemote ? 0x200 : 0))
        return w
    }

    static func keyValue(_ key: String, _ value: SpanRecord.Value) -> ProtobufWriter {
        var kv = ProtobufWriter()
        kv.string(1, key)
        kv.message(2, anyValue(value))
        return kv
    }

    static func anyValue(_ value: SpanRecord.Value) -> ProtobufWriter {
        var v = ProtobufWriter()
        switch value {
        case .string(let s): v.string(1, s, always: true)
        case .bool(let b): v.varintField(2, b ? 1 : 0, always: true)
        case .int(let i): v.varintField(3, UInt64(bitPattern: i), always: true)
        case .double(let d): v.fixed64(4, d.bitPattern, always: true)
        case .strings(let list):
            var array = ProtobufWriter()
            for s in list { array.message(1, anyValue(.string(s))) }
            v.message(5, array)
        }
        return v
    }
}

/// Protobuf wire-format output (https://protobuf.dev/programming-guides/encoding/): varints, fixed 32/64-bit
/// fields and length-delimited fields. A nested message is written into a writer of its own and appended with its
/// length, which is simple and fine at export time (off the request path).
struct ProtobufWriter {
    private(set) var bytes: [UInt8] = []

    mutating func varint(_ v: UInt64) {
        var v = v
        while v >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        bytes.append(UInt8(v))
    }

    private mutating func tag(_ field: Int, _ wireType: UInt64) {
        varint(UInt64(field) << 3 | wireType)
    }

    /// A varint field (wire type 0); a default value (0) is left out unless `always` (a oneof member must be
    /// written to say which member is set).
    mutating func varintField(_ field: Int, _ v: UInt64, always: Bool = false) {
        guard v != 0 || always else { return }
        tag(field, 0)
        varint(v)
    }

    mutating func fixed64(_ field: Int, _ v: UInt64, always: Bool = false) {
        guard v != 0 || always else { return }
        tag(field, 1)
        for i in 0..<8 { bytes.append(UInt8(truncatingIfNeeded: v >> (8 * UInt64(i)))) }
    }

    mutating func fixed32(_ field: Int, _ v: UInt32) {
        guard v != 0 else { return }
        tag(field, 5)
        for i in 0..<4 { bytes.append(UInt8(truncatingIfNeeded: v >> (8 * UInt32(i)))) }
    }

    mutating func bytesField(_ field: Int, _ b: [UInt8]) {
        tag(field, 2)
        varint(UInt64(b.count))
        bytes += b
    }

    mutating func string(_ field: Int, _ s: String, always: Bool = false) {
        guard !s.isEmpty || always else { return }
        bytesField(field, Array(s.utf8))
    }

    mutating func message(_ field: Int, _ m: ProtobufWriter) {
        bytesField(field, m.bytes)
    }
}
