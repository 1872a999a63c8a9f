/// The chunk-size line of a chunked body (RFC 9112 §7.1), `1*HEXDIG [ BWS ";" chunk-ext ] CRLF`, read as it
/// arrives. It is the one grammar for chunked request bodies (``ChunkedDecoder``) and chunked upstream responses
/// (``ResponseReader``): a chunk size read two ways is how bodies are smuggled, so both directions refuse the
/// same lines.
///
/// Strict on purpose:
/// - 1 to ``maxDigits`` hex digits, so the size fits in 63 bits and needs no overflow check; no sign, no `0x`, no
///   leading whitespace;
/// - after the digits only spaces or tabs, then the CRLF or `;` and the extensions;
/// - extensions are skipped (the proxy frames the body again), but they may hold no control character other than
///   HTAB, nor DEL, so no CR, LF or NUL hides in them;
/// - the line ends in CRLF, never a bare LF or CR;
/// - the line, CRLF included, has at most ``maxBytes`` bytes, counted per line however it is cut into reads.
struct ChunkSizeLine: Sendable, Equatable {
    enum Failure: Error, Equatable, CustomStringConvertible {
        case invalidSize
        case sizeTooLarge
        case invalidExtension
        case tooLong
        case notEndedByCRLF

        var description: String {
            switch self {
            case .invalidSize: return "invalid chunk size"
            case .sizeTooLarge: return "chunk size too large"
            case .invalidExtension: return "invalid chunk extension"
            case .tooLong: return "chunk extension too long (a chunk-size line over \(ChunkSizeLine.maxBytes) bytes)"
            case .notEndedByCRLF: return "chunk size line not ended by CRLF"
            }
        }
    }

    private enum Phase: UInt8 {
        case digits
        /// Spaces or tabs after the digits (BWS).
        case whitespace
        case extensions
        /// The CR was read.
        case lineFeed
    }

    /// Bytes one chunk-size line may have, its CRLF included.
    static let maxBytes = 4096
    /// Hex digits a chunk size may have (leading zeros included).
    static let maxDigits = 15

    private var phase = Phase.digits
    private var digits = 0
    private var bytes = 0
    private var value: Int64 = 0

    init() {}

    /// Reads the line from the start of `input`. Returns how many bytes of `input` belong to it and, once its LF
    /// was read, the chunk size; the reader is then ready for the next line. Until then every byte offered is
    /// part of the line and is consumed.
    mutating func read(_ input: UnsafeRawBufferPointer) throws(Failure) -> (consumed: Int, size: Int64?) {
        var i = 0
        while i < input.count {
            let c = input[i]
            i += 1
            bytes += 1
            if bytes > Self.maxBytes { throw .tooLong }
            switch phase {
            case .digits:
                if let h = hexDigitValue(c) {
                    if digits == Self.maxDigits { throw .sizeTooLarge }
                    digits += 1
                    value = value << 4 | Int64(h)
                } else if digits == 0 {
                    throw .invalidSize
                } else {
                    try afterSize(c)
                }
            case .whitespace:
                try afterSize(c)
            case .extensions:
                if c == 13 {
                    phase = .lineFeed
                } else if (c < 0x20 && c != 9) || c == 0x7f {
                    throw .invalidExtension
                }
            case .lineFeed:
                guard c == 10 else { throw .notEndedByCRLF }
                let size = value
                self = ChunkSizeLine()
                return (i, size)
            }
        }
        return (i, nil)
    }

    /// A byte after the digits: whitespace, the start of the extensions, or the CR.
    private mutating func afterSize(_ c: UInt8) throws(Failure) {
        switch c {
        case 32, 9: phase = .whitespace
        case 59 /* ; */: phase = .extensions
        case 13: phase = .lineFeed
        case 10: throw .notEndedByCRLF
        default: throw .invalidSize
        }
    }
}
