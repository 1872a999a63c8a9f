import CZlib

/// Decodes a `gzip` or `deflate` response body as it streams, so that ``BodyScrub`` can look for secrets in what
/// a compressed body really says. Output comes in pieces of at most ``pieceBytes``; concatenated gzip members (what
/// `cat a.gz b.gz` makes, and some servers write) decode one after the other.
///
/// Used from one queue (the connection's); a class only because the zlib stream must be ended exactly once.
final class StreamingInflate {
    static let pieceBytes = 64 * 1024

    private let encoding: BoundedInflate.Encoding
    private var stream = z_stream()
    private var started = false
    /// The current stream ended (a gzip member, or the deflate body): only another gzip member may follow.
    private var ended = false
    private var out = [UInt8](repeating: 0, count: StreamingInflate.pieceBytes)

    init(_ encoding: BoundedInflate.Encoding) {
        self.encoding = encoding
    }

    deinit {
        if started { inflateEnd(&stream) }
    }

    /// Why the body cannot be decoded (it is not what its `Content-Encoding` says).
    struct Failure: Error, Equatable {
        var message: String
    }

    /// Decodes `input` and gives each decoded piece to `emit`.
    func feed(_ input: UnsafeRawBufferPointer, emit: (UnsafeRawBufferPointer) -> Void) throws(Failure) {
        var at = 0
        while at < input.count {
            if !started || ended {
                // Bytes after the end of a deflate stream, or padding after the last gzip member: nothing to say.
                if ended, encoding == .deflate || input[at] != 0x1f { return }
                try begin(input[at...])
            }
            let base = input.baseAddress!.advanced(by: at)
            stream.next_in = UnsafeMutablePointer(mutating: base.assumingMemoryBound(to: UInt8.self))
            stream.avail_in = UInt32(input.count - at)
            var status: Int32 = Z_OK
            repeat {
                let produced: Int = out.withUnsafeMutableBytes { o in
                    stream.next_out = o.baseAddress!.assumingMemoryBound(to: UInt8.self)
                    stream.avail_out = UInt32(o.count)
                    status = inflate(&stream, Z_NO_FLUSH)
                    return o.count - Int(stream.avail_out)
                }
                if status != Z_OK, status != Z_STREAM_END, status != Z_BUF_ERROR {
                    throw Failure(message: "the \(encoding == .gzip ? "gzip" : "deflate") data is invalid")
                }
                if produced > 0 { out.withUnsafeBytes { emit(UnsafeRawBufferPointer(rebasing: $0[0..<produced])) } }
                if status == Z_BUF_ERROR { break }
            } while status != Z_STREAM_END && (stream.avail_in > 0 || stream.avail_out == 0)
            at = input.count - Int(stream.avail_in)
            stream.next_in = nil
            stream.avail_in = 0
            if status == Z_STREAM_END { ended = true }
        }
    }

    /// Whether the body ended where its encoding says it does, or had no bytes at all (a body cut short decodes as
    /// far as it went, but the client must not get it as a whole).
    var isComplete: Bool { ended || !started }

    /// Starts (or restarts, for the next gzip member) the zlib stream. A `deflate` body is the zlib format by the
    /// RFC, but some servers send raw deflate: the first two bytes say which.
    private func begin(_ first: UnsafeRawBufferPointer.SubSequence) throws(Failure) {
        let windowBits: Int32
        switch encoding {
        case .gzip:
            windowBits = 15 + 16
        case .deflate:
            let b0 = Int(first[first.startIndex])
            let b1 = first.count > 1 ? Int(first[first.startIndex + 1]) : -1
            let zlibHeader = b1 >= 0 && b0 & 0x0f == 8 && (b0 * 256 + b1) % 31 == 0
            windowBits = zlibHeader ? 15 : -15
        }
        if started {
            guard inflateReset2(&stream, windowBits) == Z_OK else { throw Failure(message: "zlib could not restart") }
        } else {
            guard ap_inflate_init2(&stream, windowBits) == Z_OK else {
                throw Failure(message: "zlib could not start")
            }
            started = true
        }
        ended = false
    }
}
