import Testing

@testable import AuthProxyCore

/// Ids as hex, written digit by digit: the same text as `String(_:radix:)` padded to the id's width.
@Suite struct TraceIDHexTests {
    @Test(arguments: [0, 1, 0xF, 0x10, 0x00F0_67AA_0BA9_02B7, 0x8000_0000_0000_0000, UInt64.max])
    func aSpanIDIsSixteenLowerCaseDigits(_ v: UInt64) {
        let plain = String(v, radix: 16)
        #expect(SpanID(v).hex == String(repeating: "0", count: 16 - plain.count) + plain)
    }

    @Test func aTraceparentIsItsParts() {
        for flags: UInt8 in [0, 1, 0x0F, 0x10, 0xAB, 0xFF] {
            let tp = TraceParent(
                traceID: TraceID(high: 0x4BF9_2F35_77B3_4DA6, low: 0xA3CE_929D_0E0E_4736), spanID: SpanID(0xA),
                flags: flags)
            let f = String(flags, radix: 16)
            #expect(
                tp.header
                    == "00-4bf92f3577b34da6a3ce929d0e0e4736-000000000000000a-\(flags < 16 ? "0" : "")\(f)")
            #expect(TraceParent.parse(tp.header) == tp)
        }
        #expect(TraceID(high: 1, low: 2).hex == "00000000000000010000000000000002")
    }
}
