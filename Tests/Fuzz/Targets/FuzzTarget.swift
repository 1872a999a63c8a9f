/// One fuzz target: a name (its corpus directory under `Tests/Fuzz/corpus/`) and the function that feeds one input
/// to the code under test and checks its invariants. A violated invariant stops the process with `fatalError`, which
/// libFuzzer reports as a crash and saves the input of.
struct FuzzTarget: Sendable {
    let name: String
    let run: @Sendable (UnsafeRawBufferPointer) -> Void

    static let all: [FuzzTarget] = [
        FuzzTarget(name: "request-head", run: RequestHeadFuzzer.run),
        FuzzTarget(name: "chunked-decoder", run: ChunkedDecoderFuzzer.run),
        FuzzTarget(name: "response-head", run: ResponseHeadFuzzer.run),
        FuzzTarget(name: "response-reader", run: ResponseReaderFuzzer.run),
        FuzzTarget(name: "toml", run: TOMLFuzzer.run),
        FuzzTarget(name: "token-rejection", run: TokenRejectionFuzzer.run),
        FuzzTarget(name: "url", run: URLFuzzer.run),
        FuzzTarget(name: "outbound-head", run: OutboundHeadFuzzer.run),
    ]
}

/// Stops the process when an invariant does not hold: libFuzzer saves the input as a crash.
func invariant(
    _ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String, file: StaticString = #fileID,
    line: UInt = #line
) {
    if !condition() { fatalError("invariant violated: \(message())", file: file, line: line) }
}

/// FNV-1a of the input: a deterministic source of the choices a target makes besides the bytes it parses (where to
/// split the input, which options to use), so that mutating any byte can change them and every crash reproduces.
func fuzzHash(_ input: UnsafeRawBufferPointer) -> UInt64 {
    var h: UInt64 = 0xcbf2_9ce4_8422_2325
    for b in input {
        h ^= UInt64(b)
        h = h &* 0x100_0000_01b3
    }
    return h
}

/// The input shown in an invariant message: printable ASCII as is, other bytes escaped, cut at 300 bytes.
func describe(_ bytes: some Collection<UInt8>) -> String {
    var s = ""
    for b in bytes.prefix(300) {
        switch b {
        case 13: s += "\\r"
        case 10: s += "\\n"
        case 9: s += "\\t"
        case 0x20..<0x7f where b != 92: s.unicodeScalars.append(Unicode.Scalar(b))
        default: s += "\\x" + String(b, radix: 16, uppercase: false).leftPadded(to: 2)
        }
    }
    return bytes.count > 300 ? s + "…(\(bytes.count) bytes)" : s
}

extension String {
    fileprivate func leftPadded(to n: Int) -> String {
        count >= n ? self : String(repeating: "0", count: n - count) + self
    }
}
