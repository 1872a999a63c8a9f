/// A W3C Trace Context `traceparent` value (https://www.w3.org/TR/trace-context/): version, trace id, parent span id
/// and flags. Pure: parsed from what a client sent, formatted for what the proxy sends upstream.
///
/// Parsing follows the specification's rules for a receiver: version `00` must be exactly 55 characters; a higher
/// version may carry more after a `-`, and is read as `00`; `ff`, upper-case hex, an all-zero trace or span id and
/// anything malformed are ignored (the proxy then starts a trace of its own, as if no header had been sent).
struct TraceParent: Equatable, Sendable {
    var traceID: TraceID
    var spanID: SpanID
    /// The trace flags byte; bit 0 is `sampled`.
    var flags: UInt8

    var sampled: Bool { flags & 1 == 1 }

    /// The header's value, always version `00`.
    var header: String {
        // Written byte by byte into the string's own storage: this goes upstream with every traced attempt.
        String(unsafeUninitializedCapacity: 55) { b in
            b[0] = 0x30
            b[1] = 0x30
            b[2] = 0x2D
            writeHex(traceID.high, into: b, at: 3)
            writeHex(traceID.low, into: b, at: 19)
            b[35] = 0x2D
            writeHex(spanID.value, into: b, at: 36)
            b[52] = 0x2D
            b[53] = hexDigit(flags >> 4)
            b[54] = hexDigit(flags & 0xF)
            return 55
        }
    }

    static func parse(_ value: some StringProtocol) -> TraceParent? {
        let b = Array(value.utf8)
        // version(2) - trace-id(32) - parent-id(16) - flags(2)
        guard b.count >= 55, b[2] == 0x2D, b[35] == 0x2D, b[52] == 0x2D,
            let version = hexByte(b[0], b[1]), version != 0xFF
        else { return nil }
        if version == 0 {
            guard b.count == 55 else { return nil }
        } else if b.count > 55, b[55] != 0x2D {
            // A later version may append fields, always after a dash.
            return nil
        }
        guard let hi = hex64(b[3..<19]), let lo = hex64(b[19..<35]), let span = hex64(b[36..<52]),
            let flags = hexByte(b[53], b[54])
        else { return nil }
        guard hi != 0 || lo != 0, span != 0 else { return nil }
        return TraceParent(traceID: TraceID(high: hi, low: lo), spanID: SpanID(span), flags: flags)
    }

    /// Lower-case hex only, as the specification requires.
    private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: return c - 0x30
        case 0x61...0x66: return c - 0x61 + 10
        default: return nil
        }
    }

    private static func hexByte(_ a: UInt8, _ b: UInt8) -> UInt8? {
        guard let h = nibble(a), let l = nibble(b) else { return nil }
        return h << 4 | l
    }

    private static func hex64(_ s: ArraySlice<UInt8>) -> UInt64? {
        var v: UInt64 = 0
        for c in s {
            guard let n = nibble(c) else { return nil }
            v = v << 4 | UInt64(n)
        }
        return v
    }
}

/// A 16-byte trace id (two big-endian halves).
struct TraceID: Hashable, Sendable {
    var high: UInt64
    var low: UInt64

    init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// A random id (never all zero).
    static func random() -> TraceID {
        var g = SystemRandomNumberGenerator()
        while true {
            let id = TraceID(high: g.next(), low: g.next())
            if id.high != 0 || id.low != 0 { return id }
        }
    }

    var hex: String {
        String(unsafeUninitializedCapacity: 32) { b in
            writeHex(high, into: b, at: 0)
            writeHex(low, into: b, at: 16)
            return 32
        }
    }

    /// The 16 bytes, big-endian, as OTLP carries them.
    var bytes: [UInt8] { bigEndianBytes(high) + bigEndianBytes(low) }
}

/// An 8-byte span id.
struct SpanID: Hashable, Sendable {
    var value: UInt64

    init(_ value: UInt64) { self.value = value }

    static func random() -> SpanID {
        var g = SystemRandomNumberGenerator()
        while true {
            let v: UInt64 = g.next()
            if v != 0 { return SpanID(v) }
        }
    }

    var hex: String { hex16(value) }
    var bytes: [UInt8] { bigEndianBytes(value) }
}

/// `v` as 16 lower-case hex digits.
func hex16(_ v: UInt64) -> String {
    String(unsafeUninitializedCapacity: 16) { b in
        writeHex(v, into: b, at: 0)
        return 16
    }
}

/// `v` as 16 lower-case hex digits at `b[at...]`.
func writeHex(_ v: UInt64, into b: UnsafeMutableBufferPointer<UInt8>, at: Int) {
    for i in 0..<16 { b[at + i] = hexDigit(UInt8(truncatingIfNeeded: v >> UInt64(60 - 4 * i)) & 0xF) }
}

/// The lower-case hex digit of `n` (0...15).
func hexDigit(_ n: UInt8) -> UInt8 {
    n < 10 ? 0x30 + n : 0x57 + n
}

func bigEndianBytes(_ v: UInt64) -> [UInt8] {
    (0..<8).map { UInt8(truncatingIfNeeded: v >> (56 - 8 * UInt64($0))) }
}
