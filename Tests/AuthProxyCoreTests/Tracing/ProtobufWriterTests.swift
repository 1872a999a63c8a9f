import Testing

@testable import AuthProxyCore

/// Nested messages written in place (the length fixed up after the body) give the same bytes as the plain way:
/// the body encoded on its own, then tag, length and body. Checked at the lengths where the length's varint grows.
@Suite struct ProtobufWriterTests {
    /// The plain encoding of a length-delimited field.
    static func delimited(_ field: Int, _ body: [UInt8]) -> [UInt8] {
        var w = ProtobufWriter()
        w.varint(UInt64(field) << 3 | 2)
        w.varint(UInt64(body.count))
        return w.bytes + body
    }

    static func filler(_ n: Int) -> [UInt8] { (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) } }

    @Test(arguments: [0, 1, 126, 127, 128, 129, 300, 16383, 16384, 16385, 2_097_151, 2_097_152])
    func aMessageOfAnyLengthIsPrefixedWithItsLength(_ n: Int) {
        let body = Self.filler(n)
        var w = ProtobufWriter()
        w.varintField(1, 5)
        w.message(2) { $0.bytesField(3, body) }
        // Bytes after the message stay where they belong.
        w.varintField(4, 9)
        let inner = Self.delimited(3, body)
        #expect(w.bytes == [0x08, 0x05] + Self.delimited(2, inner) + [0x20, 0x09])
    }

    @Test func nestedMessagesEachGetTheirOwnLength() {
        let big = Self.filler(200)
        var w = ProtobufWriter()
        w.message(1) { outer in
            outer.message(2) { $0.string(1, "a") }
            outer.message(3) { $0.bytesField(1, big) }
            outer.message(4) { _ in }
        }
        let expected = Self.delimited(
            1, Self.delimited(2, [0x0A, 0x01, 0x61]) + Self.delimited(3, Self.delimited(1, big)) + [0x22, 0x00])
        #expect(w.bytes == expected)
    }

    @Test func idsAreWrittenBigEndian() {
        var w = ProtobufWriter()
        w.bytesField(1, high: 0x0102_0304_0506_0708, low: 0x090A_0B0C_0D0E_0F10)
        w.bytesField(2, 0x1112_1314_1516_1718)
        #expect(w.bytes == [0x0A, 16] + Array(1...16) + [0x12, 8] + Array(0x11...0x18))
        #expect(Array(w.bytes[2..<18]) == TraceID(high: 0x0102_0304_0506_0708, low: 0x090A_0B0C_0D0E_0F10).bytes)
    }

    @Test func stringsAreTheirUTF8() {
        var w = ProtobufWriter()
        w.string(1, "é/ü")
        let small = "ab"  // a small string, kept inline rather than in storage of its own
        w.string(2, small)
        #expect(w.bytes == [0x0A, 5, 0xC3, 0xA9, 0x2F, 0xC3, 0xBC, 0x12, 2, 0x61, 0x62])
    }
}
