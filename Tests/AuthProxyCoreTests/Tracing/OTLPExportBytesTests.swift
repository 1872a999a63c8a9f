import Testing

@testable import AuthProxyCore

/// The export request's bytes, field for field as the protobuf encoding of opentelemetry-proto defines them, built
/// here the plain way (each nested message encoded on its own, then prefixed): the encoder, which writes everything
/// in place into one buffer, must produce exactly these bytes for every kind of span it exports.
@Suite struct OTLPExportBytesTests {
    static func varint(_ v: UInt64) -> [UInt8] {
        var v = v
        var out: [UInt8] = []
        while v >= 0x80 {
            out.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        return out + [UInt8(v)]
    }

    static func tag(_ field: Int, _ wire: UInt64) -> [UInt8] { varint(UInt64(field) << 3 | wire) }
    static func delimited(_ field: Int, _ b: [UInt8]) -> [UInt8] { tag(field, 2) + varint(UInt64(b.count)) + b }
    static func string(_ field: Int, _ s: String) -> [UInt8] { delimited(field, Array(s.utf8)) }
    /// A zero is the default, left out, except where it says which member of a oneof is set.
    static func fixed64(_ field: Int, _ v: UInt64, always: Bool = false) -> [UInt8] {
        guard v != 0 || always else { return [] }
        return tag(field, 1) + (0..<8).map { UInt8(truncatingIfNeeded: v >> (8 * UInt64($0))) }
    }

    static func anyValue(_ v: SpanRecord.Value) -> [UInt8] {
        switch v {
        case .string(let s): return string(1, s)
        case .bool(let b): return tag(2, 0) + [b ? 1 : 0]
        case .int(let i): return tag(3, 0) + varint(UInt64(bitPattern: i))
        case .double(let d): return fixed64(4, d.bitPattern, always: true)
        case .strings(let l): return delimited(5, l.flatMap { delimited(1, string(1, $0)) })
        }
    }

    static func keyValue(_ k: String, _ v: SpanRecord.Value) -> [UInt8] {
        string(1, k) + delimited(2, anyValue(v))
    }

    static func span(_ s: SpanRecord) -> [UInt8] {
        var b = delimited(1, s.traceID.bytes) + delimited(2, s.spanID.bytes)
        if let ts = s.traceState, !ts.isEmpty { b += string(3, ts) }
        if let p = s.parentSpanID { b += delimited(4, p.bytes) }
        b += string(5, s.name) + tag(6, 0) + varint(UInt64(s.kind.rawValue))
        b += fixed64(7, s.startNanos) + fixed64(8, s.endNanos)
        for (k, v) in s.attributes { b += delimited(9, keyValue(k, v)) }
        for e in s.events {
            var ev = fixed64(1, e.timeNanos) + string(2, e.name)
            for (k, v) in e.attributes { ev += delimited(3, keyValue(k, v)) }
            b += delimited(11, ev)
        }
        if s.status != .unset || s.statusMessage != nil {
            var st: [UInt8] = []
            if let m = s.statusMessage { st += string(2, m) }
            if s.status != .unset { st += tag(3, 0) + varint(UInt64(s.status.rawValue)) }
            b += delimited(15, st)
        }
        let flags: UInt32 = 0x101 | (s.parentIsRemote ? 0x200 : 0)
        return b + tag(16, 5) + (0..<4).map { UInt8(truncatingIfNeeded: flags >> (8 * UInt32($0))) }
    }

    static func request(_ spans: [SpanRecord], resource: [(String, SpanRecord.Value)]) -> [UInt8] {
        let res = resource.flatMap { delimited(1, keyValue($0.0, $0.1)) }
        let scope = string(1, "authproxy") + string(2, "9.9")
        let scopeSpans = delimited(1, scope) + spans.flatMap { delimited(2, span($0)) }
        return delimited(1, delimited(1, res) + delimited(2, scopeSpans))
    }

    static func spans() -> [SpanRecord] {
        var server = SpanRecord(
            name: "GET", kind: .server, traceID: TraceID(high: 0x4BF9_2F35_77B3_4DA6, low: 0xA3CE_929D_0E0E_4736),
            spanID: SpanID(0x00F0_67AA_0BA9_02B7), parentSpanID: SpanID(7), traceState: "congo=t61rcWkgMzE",
            startNanos: 1_700_000_000_123_456_789, endNanos: 1_700_000_000_223_456_789)
        server.parentIsRemote = true
        server.attributes = [
            ("http.request.method", .string("GET")),
            ("url.full", .string("http://origin.example:8080/" + String(repeating: "p", count: 300))),
            ("server.port", .int(8080)), ("http.response.status_code", .int(502)), ("error.type", .string("502")),
            ("authproxy.token.rejected", .bool(false)), ("ratio", .double(0.25)), ("zero", .double(0)),
            ("negative", .int(-3)), ("empty", .string("")),
        ]
        server.status = .error
        var attempt = SpanRecord(
            name: "GET", kind: .client, traceID: server.traceID, spanID: SpanID(0xFFFF_FFFF_FFFF_FFFF),
            parentSpanID: server.spanID, startNanos: 1, endNanos: 1)
        attempt.attributes = [("authproxy.route.parents", .strings(["p1:3128", "p2:3128", ""]))]
        attempt.events = [
            .init(name: "exception", timeNanos: 5, attributes: [("exception.type", .string("UpstreamError"))]),
            .init(name: "bare", timeNanos: 0, attributes: []),
        ]
        attempt.status = .ok
        var internalSpan = SpanRecord(
            name: "token wait", kind: .internal, traceID: server.traceID, spanID: SpanID(3), parentSpanID: nil,
            startNanos: 0, endNanos: 0)
        internalSpan.statusMessage = "only a message"
        return [server, attempt, internalSpan]
    }

    @Test func aBatchIsEncodedExactlyAsTheDefinitionsSay() {
        let resource: [(String, SpanRecord.Value)] = [
            ("service.name", .string("authproxy")), ("deployment.environment", .string("test")),
        ]
        // Enough spans that the batch's length takes three bytes of varint.
        let batch = Array(repeatElement(Self.spans(), count: 60).joined())
        for spans in [[], Array(batch.prefix(1)), Self.spans(), batch] {
            let bytes = OTLPEncoder.exportRequest(
                spans: spans, resource: resource, scopeName: "authproxy", scopeVersion: "9.9")
            let expected = Self.request(spans, resource: resource)
            // The first byte that differs, rather than two arrays of 100 KB in the failure.
            let differs =
                zip(bytes, expected).enumerated().first { $0.element.0 != $0.element.1 }?.offset
                ?? (bytes.count == expected.count ? nil : min(bytes.count, expected.count))
            #expect(differs == nil, "\(spans.count) spans: \(bytes.count) vs \(expected.count) bytes")
        }
        #expect(Self.request(batch, resource: resource).count > 16384)
    }
}
