/// Decodes a chunked request body (RFC 9112 §7.1) incrementally and strictly: chunk-size lines follow
/// ``ChunkSizeLine`` (the grammar upstream responses are read with too), every line ends in CRLF, and trailer
/// fields are checked (a token name, a colon, no control characters) and discarded (they are hop-by-hop for a
/// proxy that re-frames the body). A trailer section that is not field lines (`0\r\n` straight followed by the
/// next request) is refused, not read as trailers.
public struct ChunkedDecoder: Sendable {
    enum State: Sendable {
        /// Reading a chunk-size line (``sizeLine``).
        case size
        case data(remaining: Int64)
        case dataCR
        case dataLF
        case trailerLineStart
        /// Inside a trailer field line; `inValue` once its colon was read.
        case trailerLine(inValue: Bool)
        case trailerLF(endOfTrailers: Bool)
        case done
    }

    private var state: State = .size
    /// The chunk-size line being read, kept across ``decode(_:limit:output:)`` calls: a line sent in many small
    /// writes meets the same rules and limit as one sent at once.
    private var sizeLine = ChunkSizeLine()
    private var trailerBytes = 0

    static let maxTrailerBytes = 64 * 1024

    public init() {}

    public var isDone: Bool { if case .done = state { return true } else { return false } }

    /// Decodes from `input`, handing body bytes to `output` as contiguous runs. Returns how many input bytes
    /// were consumed: fewer than offered only when the body ended (the rest belongs to the next request) or
    /// when `limit` bytes of output have been produced.
    public mutating func decode(
        _ input: UnsafeRawBufferPointer, limit: Int, output: (UnsafeRawBufferPointer) -> Void
    ) throws(HTTPParseError) -> Int {
        var i = 0
        var produced = 0
        while i < input.count {
            let c = input[i]
            switch state {
            case .size:
                let line: (consumed: Int, size: Int64?)
                do throws(ChunkSizeLine.Failure) {
                    line = try sizeLine.read(UnsafeRawBufferPointer(rebasing: input[i...]))
                } catch {
                    throw .bad(error.description)
                }
                i += line.consumed
                if let size = line.size { state = size == 0 ? .trailerLineStart : .data(remaining: size) }
            case .data(let remaining):
                if produced >= limit { return i }
                let n = Int(min(remaining, Int64(input.count - i), Int64(limit - produced)))
                output(UnsafeRawBufferPointer(rebasing: input[i..<(i + n)]))
                produced += n
                i += n
                state = remaining - Int64(n) == 0 ? .dataCR : .data(remaining: remaining - Int64(n))
            case .dataCR:
                guard c == 13 else { throw .bad("chunk data not followed by CRLF") }
                i += 1
                state = .dataLF
            case .dataLF:
                guard c == 10 else { throw .bad("chunk data not followed by CRLF") }
                i += 1
                state = .size
            case .trailerLineStart:
                if c == 13 {
                    state = .trailerLF(endOfTrailers: true)
                } else if c == 10 {
                    throw .bad("bare LF in chunked trailer")
                } else if isTokenChar(c) {
                    state = .trailerLine(inValue: false)
                } else {
                    throw .bad("invalid chunked trailer field")
                }
                try countTrailer()
                i += 1
            case .trailerLine(let inValue):
                if c == 13 {
                    guard inValue else { throw .bad("chunked trailer line without colon") }
                    state = .trailerLF(endOfTrailers: false)
                } else if c == 10 {
                    throw .bad("bare LF in chunked trailer")
                } else if !inValue {
                    if c == 58 /* : */ {
                        state = .trailerLine(inValue: true)
                    } else if !isTokenChar(c) {
                        throw .bad("invalid chunked trailer field name")
                    }
                } else if (c < 0x20 && c != 9) || c == 0x7f {
                    throw .bad("invalid character in chunked trailer")
                }
                try countTrailer()
                i += 1
            case .trailerLF(let endOfTrailers):
                guard c == 10 else { throw .bad("bare CR in chunked trailer") }
                i += 1
                if endOfTrailers {
                    state = .done
                    return i
                }
                state = .trailerLineStart
            case .done:
                return i
            }
        }
        return i
    }

    private mutating func countTrailer() throws(HTTPParseError) {
        trailerBytes += 1
        if trailerBytes > Self.maxTrailerBytes { throw HTTPParseError(status: 431, "chunked trailer too large") }
    }
}
