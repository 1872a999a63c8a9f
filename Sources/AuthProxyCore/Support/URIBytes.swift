/// Byte classes of RFC 3986 and HTTP shared by the parsers, the path normaliser and the token injection.

/// The value of an ASCII hex digit, or nil.
@inline(__always)
func hexDigitValue(_ c: UInt8) -> UInt8? {
    switch c {
    case 0x30...0x39: return c - 0x30
    case 0x41...0x46: return c - 0x41 + 10
    case 0x61...0x66: return c - 0x61 + 10
    default: return nil
    }
}

/// RFC 3986 §2.3 unreserved characters: ALPHA / DIGIT / "-" / "." / "_" / "~".
@inline(__always)
func isUnreservedURIByte(_ b: UInt8) -> Bool {
    switch b {
    case 0x30...0x39, 0x41...0x5a, 0x61...0x7a, UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
        UInt8(ascii: "~"):
        return true
    default: return false
    }
}
