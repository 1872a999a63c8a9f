import CZlib

/// Decodes a `Content-Encoding: gzip` or `deflate` body, for sniffing only, to at most `limit` bytes.
///
/// The client always gets the original (encoded) bytes; this copy only lets ``TokenRejection`` read a
/// compressed error body. Output is bounded (a small compressed body can expand a thousandfold), and a body
/// cut short (the sniff buffer holds the first bytes only) decodes as far as it goes.
public enum BoundedInflate {
    public enum Encoding: Sendable, Equatable {
        case gzip
        case deflate

        /// The encoding named by a `Content-Encoding` value; nil for identity or one this cannot decode
        /// (several codings, `br`, `zstd`).
        public init?(contentEncoding: String?) {
            guard let v = contentEncoding?.trimmingHTTPWhitespace().lowercased(), !v.isEmpty else { return nil }
            switch v {
            case "gzip", "x-gzip": self = .gzip
            case "deflate": self = .deflate
            default: return nil
            }
        }
    }

    /// The decoded bytes (at most `limit`), or nil when `bytes` are not valid data of that encoding.
    public static func decode(_ bytes: [UInt8], encoding: Encoding, limit: Int) -> [UInt8]? {
        switch encoding {
        // 15 + 32: a gzip or zlib header, detected by zlib.
        case .gzip: return inflate(bytes, windowBits: 15 + 32, limit: limit)
        // "deflate" is the zlib format by the RFC, but some servers send a raw deflate stream.
        case .deflate:
            return inflate(bytes, windowBits: 15, limit: limit) ?? inflate(bytes, windowBits: -15, limit: limit)
        }
    }

    private static func inflate(_ input: [UInt8], windowBits: Int32, limit: Int) -> [UInt8]? {
        guard !input.isEmpty, limit > 0 else { return nil }
        var stream = z_stream()
        guard ap_inflate_init2(&stream, windowBits) == Z_OK else { return nil }
        defer { inflateEnd(&stream) }
        var out = [UInt8](repeating: 0, count: limit)
        var produced = 0
        var status: Int32 = Z_OK
        var input = input
        input.withUnsafeMutableBufferPointer { inp in
            out.withUnsafeMutableBufferPointer { outp in
                stream.next_in = inp.baseAddress
                stream.avail_in = UInt32(inp.count)
                stream.next_out = outp.baseAddress
                stream.avail_out = UInt32(outp.count)
                while stream.avail_out > 0 {
                    status = CZlib.inflate(&stream, Z_NO_FLUSH)
                    if status != Z_OK { break }
                    if stream.avail_in == 0 { break }  // truncated input: what decoded so far is the answer
                }
                produced = outp.count - Int(stream.avail_out)
            }
        }
        // Z_BUF_ERROR: no progress possible (input ended early, or output full): keep what came out.
        guard status == Z_OK || status == Z_STREAM_END || status == Z_BUF_ERROR else { return nil }
        guard produced > 0 || status == Z_STREAM_END else { return nil }
        return Array(out[0..<produced])
    }
}
