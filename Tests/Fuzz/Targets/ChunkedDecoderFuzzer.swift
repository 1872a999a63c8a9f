@testable import AuthProxyCore

/// The chunked request-body decoder (`HTTP/ChunkedDecoder.swift`) on arbitrary bytes.
///
/// Invariants:
/// - it never outputs more bytes than it consumed, nor consumes more than it was given, and stops consuming only
///   at the end of the body;
/// - the outcome (body, end, bytes consumed or the error) does not depend on how the bytes arrive: all at once with no
///   output limit, or in pieces of hash-chosen sizes with a small output limit (as a connection feeds it while the
///   upstream is slow);
/// - a body it accepted, framed again as chunks, decodes to the same bytes.
enum ChunkedDecoderFuzzer {
    struct Outcome: Equatable {
        var body: [UInt8] = []
        var consumed = 0
        var done = false
        var error: HTTPParseError? = nil
    }

    static func run(_ input: UnsafeRawBufferPointer) {
        let bytes = Array(input)
        let once = decode(bytes, pieces: [bytes.count], limit: .max)
        invariant(once.consumed <= bytes.count, "consumed \(once.consumed) of \(bytes.count)")
        invariant(once.body.count <= bytes.count, "output \(once.body.count) > input \(bytes.count)")
        if once.error == nil {
            invariant(once.body.count <= once.consumed, "output \(once.body.count) > consumed \(once.consumed)")
        }
        if once.error == nil, !once.done {
            invariant(once.consumed == bytes.count, "stopped at \(once.consumed) of \(bytes.count) before the end")
        }

        var h = fuzzHash(input)
        var pieces: [Int] = []
        var left = bytes.count
        while left > 0 {
            let n = min(left, 1 + Int(h % 17))
            pieces.append(n)
            left -= n
            h = h >> 4 | (h & 0xf) << 60
        }
        let limit = 1 + Int(fuzzHash(input) >> 59)
        let split = decode(bytes, pieces: pieces, limit: limit)
        invariant(
            split == once, "in pieces \(pieces) limit \(limit): \(split) vs at once: \(once); input \(describe(bytes))")

        if once.done, once.error == nil {
            var reframed = Array(String(once.body.count, radix: 16).utf8) + [13, 10] + once.body + [13, 10]
            if once.body.isEmpty { reframed = [] }
            reframed += Array("0\r\n\r\n".utf8)
            let again = decode(reframed, pieces: [reframed.count], limit: .max)
            invariant(
                again == Outcome(body: once.body, consumed: reframed.count, done: true),
                "re-framed body decodes to \(again)")
        }
    }

    /// Feeds `bytes` in `pieces` the way a connection does: each read is appended to what is still unconsumed, and the
    /// decoder is called until it has taken everything or the body ended.
    static func decode(_ bytes: [UInt8], pieces: [Int], limit: Int) -> Outcome {
        var d = ChunkedDecoder()
        var out = Outcome()
        var pending: [UInt8] = []
        var offset = 0
        for n in pieces {
            pending += bytes[offset..<(offset + n)]
            offset += n
            while !pending.isEmpty, !d.isDone {
                let used: Int
                do {
                    used = try pending.withUnsafeBytes { raw in
                        try d.decode(raw, limit: limit) { out.body.append(contentsOf: $0) }
                    }
                } catch {
                    out.error = (error as? HTTPParseError) ?? HTTPParseError(status: 0, "\(error)")
                    out.consumed = -1  // where in the failing call it stopped is not reported
                    return out
                }
                invariant(used <= pending.count, "consumed \(used) of \(pending.count) offered")
                invariant(used > 0 || d.isDone, "consumed nothing of \(pending.count) bytes before the end")
                pending.removeFirst(used)
                out.consumed += used
                if used == 0 { break }
            }
            if d.isDone { break }
        }
        out.done = d.isDone
        return out
    }
}
