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
    /// instrumentation scope. Written into one buffer, each nested message in place (``ProtobufWriter/message(_:_:)``):
    /// no intermediate buffer per message, attribute or value.
    static func exportRequest(
        spans: [SpanRecord], resource: [(String, SpanRecord.Value)], scopeName: String, scopeVersion: String
    ) -> [UInt8] {
        var w = ProtobufWriter(capacity: 256 + spans.count * 512)
        w.message(1) { resourceSpans in
            resourceSpans.message(1) { res in
                for (k, v) in resource { res.message(1) { keyValue(k, v, into: &$0) } }
            }
            resourceSpans.message(2) { scopeSpans in
                scopeSpans.message(1) { scope in
                    scope.string(1, scopeName)
                    scope.string(2, scopeVersion)
                }
                for s in spans { scopeSpans.message(2) { span(s, into: &$0) } }
            }
        }
        return w.bytes
    }

    static func span(_ s: SpanRecord, into w: inout ProtobufWriter) {
        w.bytesField(1, high: s.traceID.high, low: s.traceID.low)
        w.bytesField(2, s.spanID.value)
        if let ts = s.traceState, !ts.isEmpty { w.string(3, ts) }
        if let p = s.parentSpanID { w.bytesField(4, p.value) }
        w.string(5, s.name)
        w.varintField(6, UInt64(s.kind.rawValue))
        w.fixed64(7, s.startNanos)
        w.fixed64(8, s.endNanos)
        for (k, v) in s.attributes { w.message(9) { keyValue(k, v, into: &$0) } }
        for e in s.events {
            w.message(11) { ev in
                ev.fixed64(1, e.timeNanos)
                ev.string(2, e.name)
                for (k, v) in e.attributes { ev.message(3) { keyValue(k, v, into: &$0) } }
            }
        }
        if s.status != .unset || s.statusMessage != nil {
            w.message(15) { st in
                if let m = s.statusMessage { st.string(2, m) }
                if s.status != .unset { st.varintField(3, UInt64(s.status.rawValue)) }
            }
        }
        // Bits 0-7: the W3C flags (sampled: only sampled spans are exported); bit 8: whether the parent is remote
        // is known, bit 9: it is.
        w.fixed32(16, 0x101 | (s.parentIsRemote ? 0x200 : 0))
    }

    static func keyValue(_ key: String, _ value: SpanRecord.Value, into w: inout ProtobufWriter) {
        w.string(1, key)
        w.message(2) { anyValue(value, into: &$0) }
    }

    static func anyValue(_ value: SpanRecord.Value) -> ProtobufWriter {
        var v = ProtobufWriter()
        anyValue(value, into: &v)
        return v
    }

    static func anyValue(_ value: SpanRecord.Value, into v: inout ProtobufWriter) {
        switch value {
        case .string(let s): v.string(1, s, always: true)
        case .bool(let b): v.varintField(2, b ? 1 : 0, always: true)
        case .int(let i): v.varintField(3, UInt64(bitPattern: i), always: true)
        case .double(let d): v.fixed64(4, d.bitPattern, always: true)
        case .strings(let list):
            v.message(5) { array in
                for s in list { array.message(1) { $0.string(1, s, always: true) } }
            }
        }
    }
}

/// Protobuf wire-format output (https://protobuf.dev/programming-guides/encoding/): varints, fixed 32/64-bit
/// fields and length-delimited fields, appended to one buffer.
struct ProtobufWriter {
    private(set) var bytes: [UInt8] = []

    init() {}

    init(capacity: Int) {
        bytes.reserveCapacity(capacity)
    }

    @inline(__always)
    mutating func varint(_ v: UInt64) {
        var v = v
        while v >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        bytes.append(UInt8(v))
    }

    @inline(__always)
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
        withUnsafeBytes(of: v.littleEndian) { bytes.append(contentsOf: $0) }
    }

    mutating func fixed32(_ field: Int, _ v: UInt32) {
        guard v != 0 else { return }
        tag(field, 5)
        withUnsafeBytes(of: v.littleEndian) { bytes.append(contentsOf: $0) }
    }

    mutating func bytesField(_ field: Int, _ b: [UInt8]) {
        tag(field, 2)
        varint(UInt64(b.count))
        bytes += b
    }

    /// An 8-byte id (a span id), big-endian.
    mutating func bytesField(_ field: Int, _ id: UInt64) {
        tag(field, 2)
        bytes.append(8)
        withUnsafeBytes(of: id.bigEndian) { bytes.append(contentsOf: $0) }
    }

    /// A 16-byte id (a trace id) from its big-endian halves.
    mutating func bytesField(_ field: Int, high: UInt64, low: UInt64) {
        tag(field, 2)
        bytes.append(16)
        withUnsafeBytes(of: high.bigEndian) { bytes.append(contentsOf: $0) }
        withUnsafeBytes(of: low.bigEndian) { bytes.append(contentsOf: $0) }
    }

    @inline(__always)
    mutating func string(_ field: Int, _ s: String, always: Bool = false) {
        guard !s.isEmpty || always else { return }
        tag(field, 2)
        var s = s
        s.withUTF8 { u in
            varint(UInt64(u.count))
            bytes.append(contentsOf: u)
        }
    }

    /// A nested message written in place by `body`. Its length comes before it and is known only once it is
    /// written: one byte is kept for it, enough below 128 bytes (an attribute, a value); a longer message (a span,
    /// the batch) is moved up by the length's extra bytes.
    mutating func message(_ field: Int, _ body: (inout ProtobufWriter) -> Void) {
        tag(field, 2)
        let at = bytes.count
        bytes.append(0)
        body(&self)
        let n = bytes.count - at - 1
        if n < 0x80 {
            bytes[at] = UInt8(n)
            return
        }
        var extra = 0
        var rest = n >> 7
        while rest > 0 {
            extra += 1
            rest >>= 7
        }
        bytes.append(contentsOf: repeatElement(0, count: extra))
        bytes.withUnsafeMutableBytes { p in
            let base = p.baseAddress!
            // Overlapping regions: copyMemory moves as memmove does.
            (base + at + 1 + extra).copyMemory(from: base + at + 1, byteCount: n)
            var v = UInt64(n)
            var i = at
            while v >= 0x80 {
                p[i] = UInt8(truncatingIfNeeded: v) | 0x80
                v >>= 7
                i += 1
            }
            p[i] = UInt8(v)
        }
    }
}
