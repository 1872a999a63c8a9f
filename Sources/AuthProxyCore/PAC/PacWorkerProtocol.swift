/// The messages between the proxy and its PAC worker process (``PacEngine``, ``PacWorker``), and their framing on
/// the socket between them. Pure: bytes in, messages out.
///
/// A frame is a 4-byte big-endian length, then that many bytes: one kind byte and the message's strings, each a
/// 4-byte big-endian length and its UTF-8 bytes. A frame longer than ``maxFrameBytes`` is a protocol error: the
/// peer is broken or hostile, and the connection is given up (the worker restarted).
enum PacWorkerProtocol {
    /// A PAC file of several MiB is already far beyond any real one (they are a few KiB to a few hundred).
    static let maxFrameBytes = 16 << 20

    /// From the proxy to the worker.
    enum Request: Equatable, Sendable {
        /// Replace the script in force with this one: parse it and answer a probe.
        case load(String)
        case findProxy(url: String, host: String)
    }

    /// From the worker to the proxy.
    enum Reply: Equatable, Sendable {
        /// The script loaded.
        case loaded
        case answer(String)
        /// The script failed: it threw, does not parse, or gave no answer.
        case scriptError(String)
        /// The JavaScript engine ran out of the memory the worker's limit leaves it.
        case outOfMemory(String)
    }

    struct ProtocolError: Error, Equatable {
        var message: String
    }

    static func encode(_ r: Request) -> [UInt8] {
        switch r {
        case .load(let s): return frame(kind: UInt8(ascii: "L"), [s])
        case .findProxy(let url, let host): return frame(kind: UInt8(ascii: "F"), [url, host])
        }
    }

    static func encode(_ r: Reply) -> [UInt8] {
        switch r {
        case .loaded: return frame(kind: UInt8(ascii: "O"), [])
        case .answer(let s): return frame(kind: UInt8(ascii: "A"), [s])
        case .scriptError(let s): return frame(kind: UInt8(ascii: "E"), [s])
        case .outOfMemory(let s): return frame(kind: UInt8(ascii: "M"), [s])
        }
    }

    static func decodeRequest(_ body: [UInt8]) -> Result<Request, ProtocolError> {
        guard let (kind, fields) = fields(body) else { return .failure(ProtocolError(message: "malformed request")) }
        switch (kind, fields.count) {
        case (UInt8(ascii: "L"), 1): return .success(.load(fields[0]))
        case (UInt8(ascii: "F"), 2): return .success(.findProxy(url: fields[0], host: fields[1]))
        default: return .failure(ProtocolError(message: "unknown request"))
        }
    }

    static func decodeReply(_ body: [UInt8]) -> Result<Reply, ProtocolError> {
        guard let (kind, fields) = fields(body) else { return .failure(ProtocolError(message: "malformed reply")) }
        switch (kind, fields.count) {
        case (UInt8(ascii: "O"), 0): return .success(.loaded)
        case (UInt8(ascii: "A"), 1): return .success(.answer(fields[0]))
        case (UInt8(ascii: "E"), 1): return .success(.scriptError(fields[0]))
        case (UInt8(ascii: "M"), 1): return .success(.outOfMemory(fields[0]))
        default: return .failure(ProtocolError(message: "unknown reply"))
        }
    }

    private static func frame(kind: UInt8, _ strings: [String]) -> [UInt8] {
        var body: [UInt8] = [kind]
        for s in strings {
            let bytes = Array(s.utf8)
            appendLength(bytes.count, to: &body)
            body += bytes
        }
        var out: [UInt8] = []
        out.reserveCapacity(body.count + 4)
        appendLength(body.count, to: &out)
        return out + body
    }

    private static func appendLength(_ n: Int, to out: inout [UInt8]) {
        let v = UInt32(truncatingIfNeeded: n)
        out += [UInt8(v >> 24), UInt8((v >> 16) & 0xff), UInt8((v >> 8) & 0xff), UInt8(v & 0xff)]
    }

    static func readLength(_ b: ArraySlice<UInt8>) -> Int {
        let i = b.startIndex
        return Int(b[i]) << 24 | Int(b[i + 1]) << 16 | Int(b[i + 2]) << 8 | Int(b[i + 3])
    }

    /// The kind byte and the strings of a frame's body; nil when the lengths do not add up to the body.
    private static func fields(_ body: [UInt8]) -> (UInt8, [String])? {
        guard let kind = body.first else { return nil }
        var out: [String] = []
        var i = 1
        while i < body.count {
            guard body.count - i >= 4 else { return nil }
            let n = readLength(body[i..<i + 4])
            i += 4
            guard n <= body.count - i else { return nil }
            out.append(String(decoding: body[i..<i + n], as: UTF8.self))
            i += n
        }
        return (kind, out)
    }

    /// Collects bytes as they arrive and hands out whole frames' bodies.
    struct FrameReader: Sendable {
        private var buffer: [UInt8] = []

        init() {}

        mutating func append(_ bytes: some Sequence<UInt8>) {
            buffer += bytes
        }

        /// The next whole frame's body, nil when more bytes are needed, or an error for an oversized frame.
        mutating func next() -> Result<[UInt8], ProtocolError>? {
            guard buffer.count >= 4 else { return nil }
            let n = readLength(buffer[0..<4])
            guard n <= maxFrameBytes else {
                return .failure(ProtocolError(message: "a frame of \(n) bytes is over the limit of \(maxFrameBytes)"))
            }
            guard buffer.count >= 4 + n else { return nil }
            let body = Array(buffer[4..<4 + n])
            buffer.removeFirst(4 + n)
            return .success(body)
        }
    }
}
