@testable import AuthProxyCore

/// The proxy's own HTTP/1.1 client's response reader (`Upstream/HTTP1/ResponseReader.swift`) on arbitrary bytes
/// from an upstream connection, driven as ``HTTP1Transfer`` drives it.
///
/// Invariants:
/// - no step names more bytes than it was given, and the body handed on is never larger than the input;
/// - the outcome (head lines, body, completion, whether the connection is reused, the failure, bytes left over)
///   does not depend on how the bytes arrive: all at once, or in pieces of hash-chosen sizes;
/// - the head lines it handed on, fed to the ``ResponseHeadAssembler`` as the connection feeds them, give the client
///   the status the body was framed by (when the assembler does not refuse the head).
enum ResponseReaderFuzzer {
    struct Outcome: Equatable {
        var lines: [[UInt8]] = []
        var body: [UInt8] = []
        var complete = false
        var reusable = false
        var failure: ResponseReader.Failure? = nil
        var leftover = 0
        var status = 0
        /// A `101` answered the upgrade (when the request asked for one): what follows is the new protocol's.
        var switched = false
    }

    static func run(_ input: UnsafeRawBufferPointer) {
        let bytes = Array(input)
        let h = fuzzHash(input)
        let isHead = h & 1 != 0
        // A WebSocket handshake (a GET) lets a 101 through; every other request refuses it.
        let upgrade = !isHead && h & 2 != 0
        let once = read(bytes, pieces: [bytes.count], isHead: isHead, upgrade: upgrade)
        invariant(once.body.count <= bytes.count, "body \(once.body.count) > input \(bytes.count)")

        var pieces: [Int] = []
        var left = bytes.count
        var k = h
        while left > 0 {
            let n = min(left, 1 + Int(k % 23))
            pieces.append(n)
            left -= n
            k = k >> 5 | (k & 0x1f) << 59
        }
        let split = read(bytes, pieces: pieces, isHead: isHead, upgrade: upgrade)
        invariant(split == once, "in pieces \(pieces): \(split) vs at once: \(once); input \(describe(bytes))")

        invariant(
            !once.switched || (upgrade && once.status == 101 && once.body.isEmpty),
            "switched without an upgrade to a 101: \(once); input \(describe(bytes))")
        if once.failure == nil, once.lines.count > 0, once.complete || !once.body.isEmpty {
            // The final head was read: the assembler, fed the same lines, gives the client the same status.
            var assembler = ResponseHeadAssembler()
            for line in once.lines { _ = line.withUnsafeBytes { assembler.add(line: $0) } }
            if assembler.violation == nil {
                invariant(
                    assembler.status == once.status,
                    "client status \(assembler.status), framed by \(once.status); input \(describe(bytes))")
            }
        }
    }

    static func read(_ bytes: [UInt8], pieces: [Int], isHead: Bool, upgrade: Bool) -> Outcome {
        var out = Outcome()
        var reader = ResponseReader(isHeadRequest: isHead, upgradeRequested: upgrade)
        var pending: [UInt8] = []
        var offset = 0
        for piece in pieces + [0] {
            pending += bytes[offset..<(offset + piece)]
            offset += piece
            while true {
                let result: Result<ResponseReader.Step, ResponseReader.Failure> = pending.withUnsafeBytes { b in
                    do throws(ResponseReader.Failure) { return .success(try reader.next(b)) } catch {
                        return .failure(error)
                    }
                }
                let step: ResponseReader.Step
                switch result {
                case .success(let s): step = s
                case .failure(let error):
                    out.failure = error
                    out.status = reader.status
                    return out
                }
                switch step {
                case .headLine(let n), .framing(let n), .body(let n):
                    invariant(n > 0 && n <= pending.count, "step \(step) with \(pending.count) bytes")
                    if case .headLine = step { out.lines.append(Array(pending[0..<n])) }
                    if case .body = step {
                        out.body += pending[0..<n]
                        reader.bodyDelivered(n)
                    }
                    pending.removeFirst(n)
                    continue
                case .switched:
                    out.switched = true
                    out.leftover = pending.count + bytes.count - offset
                    out.status = reader.status
                    return out
                case .complete:
                    out.complete = true
                    out.reusable = reader.reusable
                    out.leftover = pending.count + bytes.count - offset
                    out.status = reader.status
                    return out
                case .needMore:
                    break
                }
                break
            }
        }
        do throws(ResponseReader.Failure) {
            try reader.endOfInput()
            out.complete = reader.isComplete
            out.reusable = reader.reusable
        } catch {
            out.failure = error
        }
        out.status = reader.status
        return out
    }
}
