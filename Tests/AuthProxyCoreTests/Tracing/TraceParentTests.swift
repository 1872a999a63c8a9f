import Testing

@testable import AuthProxyCore

/// W3C `traceparent`: what a receiver accepts, what it ignores, and the header the proxy writes.
@Suite struct TraceParentTests {
    static let valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    @Test func parsesAValidHeader() throws {
        let tp = try #require(TraceParent.parse(Self.valid))
        #expect(tp.traceID.hex == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(tp.spanID.hex == "00f067aa0ba902b7")
        #expect(tp.sampled)
        #expect(tp.header == Self.valid)
    }

    @Test func flagsOtherThanSampledAreKeptAndReadBitwise() throws {
        let tp = try #require(TraceParent.parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-02"))
        #expect(!tp.sampled)
        #expect(tp.flags == 2)
        #expect(tp.header.hasSuffix("-02"))
        let both = try #require(TraceParent.parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03"))
        #expect(both.sampled)
    }

    @Test(arguments: [
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",  // no flags
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",  // version 00 has nothing more
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  // upper case
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  // zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  // zero span id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // forbidden version
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // wrong separator
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",  // not hex
        "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",  // later version: more only after a dash
    ])
    func ignoresInvalidHeaders(_ value: String) {
        #expect(TraceParent.parse(value) == nil)
    }

    @Test func aLaterVersionIsReadAsVersion00() throws {
        let tp = try #require(TraceParent.parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-ever"))
        #expect(tp.traceID.hex == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(tp.header == Self.valid)
    }

    @Test func formatsSmallIdsWithLeadingZeros() {
        let tp = TraceParent(traceID: TraceID(high: 0, low: 1), spanID: SpanID(0xAB), flags: 0)
        #expect(tp.header == "00-00000000000000000000000000000001-00000000000000ab-00")
        #expect(TraceParent.parse(tp.header) == tp)
    }

    @Test func randomIdsRoundTrip() {
        for _ in 0..<100 {
            let tp = TraceParent(traceID: .random(), spanID: .random(), flags: 1)
            #expect(TraceParent.parse(tp.header) == tp)
        }
    }

    @Test func bytesAreBigEndian() {
        let id = TraceID(high: 0x0102_0304_0506_0708, low: 0x090A_0B0C_0D0E_0F10)
        #expect(id.bytes == Array(1...16))
        #expect(SpanID(0x0102_0304_0506_0708).bytes == Array(1...8))
    }
}
