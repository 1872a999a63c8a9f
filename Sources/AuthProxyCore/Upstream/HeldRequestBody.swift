/// A small request body held whole in memory (a token request's form, an OTLP export), handed to a transfer as it
/// asks for it (``UpstreamExchangeDelegate/transferNeedsBody(_:)``) and rewound for an authentication round or a
/// resend.
struct HeldRequestBody {
    let bytes: [UInt8]
    private var sent = 0

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    var count: Int { bytes.count }

    /// Copies the next bytes into `buffer`; `.end` once everything went.
    mutating func supply(_ buffer: UnsafeMutableRawBufferPointer) -> BodySupply {
        let n = min(buffer.count, bytes.count - sent)
        if n == 0 { return .end }
        let from = sent
        bytes.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[from..<(from + n)])) }
        sent += n
        return .bytes(n)
    }

    /// From the start again.
    mutating func rewind() {
        sent = 0
    }
}
