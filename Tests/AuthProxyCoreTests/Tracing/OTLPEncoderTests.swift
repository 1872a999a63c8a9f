import Testing

@testable import AuthProxyCore

/// The protobuf wire encoding of the export request, checked byte by byte for the small parts and by a minimal
/// decoder for the structure (the e2e test decodes it with the official definitions).
@Suite struct OTLPEncoderTests {
    @Test func varints() {
        var w = ProtobufWriter()
        w.varint(1)
        w.varint(150)
        w.varint(UInt64.max)
        #expect(w.bytes == [0x01, 0x96, 0x01] + [UInt8](repeating: 0xFF, count: 9) + [0x01])
    }

    @Test func fieldsAndDefaults() {
        var w = ProtobufWriter()
        w.varintField(6, 2)
        w.varintField(7, 0)  // a default is left out
        w.string(5, "GET")
        w.string(3, "")  // so is an empty string
        w.fixed64(7, 0x0102_0304_0506_0708)
        w.fixed32(16, 0x101)
        #expect(
            w.bytes == [
                0x30, 0x02, 0x2A, 0x03, 0x47, 0x45, 0x54, 0x39, 8, 7, 6, 5, 4, 3, 2, 1, 0x85, 0x01, 0x01, 0x01, 0, 0,
            ]
        )
    }

    @Test func oneofMembersAreWrittenEvenWhenDefault() {
        #expect(OTLPEncoder.anyValue(.bool(false)).bytes == [0x10, 0x00])
        #expect(OTLPEncoder.anyValue(.int(0)).bytes == [0x18, 0x00])
        #expect(OTLPEncoder.anyValue(.string("")).bytes == [0x0A, 0x00])
        // A negative int64 is ten bytes of varint (two's complement), as protobuf's int64 is.
        #expect(OTLPEncoder.anyValue(.int(-1)).bytes.count == 11)
    }

    /// (field, wire type, payload) of a message's top-level fields.
    static func fields(_ b: [UInt8]) -> [(Int, Int, [UInt8])] {
        var out: [(Int, Int, [UInt8])] = []
        var i = 0
        func varint() -> UInt64 {
            var v: UInt64 = 0
            var shift: UInt64 = 0
            while true {
                let c = b[i]
                i += 1
                v |= UInt64(c & 0x7F) << shift
                if c < 0x80 { return v }
                shift += 7
            }
        }
        while i < b.count {
            let tag = varint()
            let field = Int(tag >> 3), wire = Int(tag & 7)
            switch wire {
            case 0:
                let start = i
                _ = varint()
                out.append((field, wire, Array(b[start..<i])))
            case 1:
                out.append((field, wire, Array(b[i..<(i + 8)])))
                i += 8
            case 2:
                let n = Int(varint())
                out.append((field, wire, Array(b[i..<(i + n)])))
                i += n
            case 5:
                out.append((field, wire, Array(b[i..<(i + 4)])))
                i += 4
            default:
                Issue.record("unexpected wire type \(wire)")
                return out
            }
        }
        return out
    }

    @Test func anExportRequestNestsResourceScopeAndSpans() throws {
        var s = SpanRecord(
            name: "GET", kind: .server, traceID: TraceID(high: 1, low: 2), spanID: SpanID(3), parentSpanID: SpanID(4),
            traceState: "k=v", startNanos: 10, endNanos: 20)
        s.parentIsRemote = true
        s.attributes = [("http.response.status_code", .int(200)), ("url.full", .string("http://a/b"))]
        s.events = [.init(name: "e", timeNanos: 15, attributes: [])]
        s.status = .error
        s.statusMessage = "bad"
        let bytes = OTLPEncoder.exportRequest(
            spans: [s, s], resource: [("service.name", .string("authproxy"))], scopeName: "authproxy",
            scopeVersion: "1")
        let top = Self.fields(bytes)
        #expect(top.map(\.0) == [1])
        let resourceSpans = Self.fields(top[0].2)
        #expect(resourceSpans.map(\.0) == [1, 2])
        let resourceAttributes = Self.fields(resourceSpans[0].2)
        #expect(resourceAttributes.count == 1)
        let scopeSpans = Self.fields(resourceSpans[1].2)
        #expect(scopeSpans.map(\.0) == [1, 2, 2])
        let span = Self.fields(scopeSpans[1].2)
        #expect(span.map(\.0) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 11, 15, 16])
        #expect(span[0].2 == TraceID(high: 1, low: 2).bytes)
        #expect(span[1].2 == SpanID(3).bytes)
        #expect(span[3].2 == SpanID(4).bytes)
        #expect(String(decoding: span[4].2, as: UTF8.self) == "GET")
        #expect(span[5].2 == [2])  // SPAN_KIND_SERVER
        #expect(span[6].2 == [10, 0, 0, 0, 0, 0, 0, 0])
        #expect(span[12].2 == [0x01, 0x03, 0, 0])  // sampled, parent known to be remote
        let status = Self.fields(span[11].2)
        #expect(status.map(\.0) == [2, 3])
        #expect(status[1].2 == [2])  // STATUS_CODE_ERROR
        let kv = Self.fields(span[8].2)
        #expect(String(decoding: kv[0].2, as: UTF8.self) == "http.response.status_code")
        #expect(Self.fields(kv[1].2).map(\.0) == [3])
    }
}
