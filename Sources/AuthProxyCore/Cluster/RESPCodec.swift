import CHiredis

/// One Redis reply, copied out of hiredis's reply object.
enum RedisReply: Equatable, Sendable {
    case string([UInt8])
    case status(String)
    case integer(Int64)
    case null
    case error(String)
    case array([RedisReply])

    /// A bulk or status string as text.
    var text: String? {
        switch self {
        case .string(let b): String(decoding: b, as: UTF8.self)
        case .status(let s): s
        default: nil
        }
    }
}

/// The Redis protocol (RESP2) through hiredis: commands formatted with `redisFormatCommandArgv`, replies parsed by
/// hiredis's reader fed with whatever bytes arrived. Only these two parts of hiredis are used: Debian 12's hiredis
/// 0.14 has no TLS and no timers, so the connection (socket, TLS, timeouts) is the proxy's own
/// (``RedisConnection``). No I/O here, so it is tested with bytes.
///
/// Ownership: one codec per connection, used on that connection's queue.
final class RESPCodec {
    private let reader: UnsafeMutablePointer<redisReader>

    init() {
        // Only fails when malloc does.
        reader = redisReaderCreate()!
    }

    deinit { redisReaderFree(reader) }

    /// The bytes of one command.
    static func format(_ args: [[UInt8]]) -> [UInt8] {
        var out: UnsafeMutablePointer<CChar>?
        let lengths = args.map(\.count)
        // Each argument's bytes must stay valid during the call: copied into buffers kept alive until it returns.
        let buffers = args.map { a -> UnsafeMutablePointer<CChar> in
            let p = UnsafeMutablePointer<CChar>.allocate(capacity: max(1, a.count))
            a.withUnsafeBufferPointer { src in
                src.withMemoryRebound(to: CChar.self) { s in
                    if let base = s.baseAddress { p.update(from: base, count: a.count) }
                }
            }
            return p
        }
        defer { for b in buffers { b.deallocate() } }
        var argv: [UnsafePointer<CChar>?] = buffers.map { UnsafePointer($0) }
        let n = redisFormatCommandArgv(&out, Int32(args.count), &argv, lengths)
        guard n > 0, let out else { return [] }
        defer { redisFreeCommand(out) }
        return out.withMemoryRebound(to: UInt8.self, capacity: Int(n)) {
            Array(UnsafeBufferPointer(start: $0, count: Int(n)))
        }
    }

    static func format(_ args: [String]) -> [UInt8] { format(args.map { Array($0.utf8) }) }

    /// Hands bytes read from the connection to the parser.
    func feed(_ bytes: UnsafeRawBufferPointer) throws(RedisError) {
        guard bytes.count > 0 else { return }
        let rc = redisReaderFeed(reader, bytes.baseAddress!.assumingMemoryBound(to: CChar.self), bytes.count)
        if rc != REDIS_OK { throw protocolError() }
    }

    func feed(_ bytes: [UInt8]) throws(RedisError) {
        let copy = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, bytes.count), alignment: 1)
        defer { copy.deallocate() }
        copy.copyBytes(from: bytes)
        try feed(UnsafeRawBufferPointer(rebasing: copy[0..<bytes.count]))
    }

    /// The next complete reply, nil while more bytes are needed.
    func next() throws(RedisError) -> RedisReply? {
        var raw: UnsafeMutableRawPointer?
        guard redisReaderGetReply(reader, &raw) == REDIS_OK else { throw protocolError() }
        guard let raw else { return nil }
        defer { freeReplyObject(raw) }
        return Self.copy(raw.assumingMemoryBound(to: redisReply.self))
    }

    private func protocolError() -> RedisError {
        let message = withUnsafeBytes(of: reader.pointee.errstr) {
            String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
        }
        return RedisError(.protocolError, "the server's reply is not RESP: \(message)")
    }

    private static func copy(_ r: UnsafeMutablePointer<redisReply>) -> RedisReply {
        let v = r.pointee
        func bytes() -> [UInt8] {
            guard let s = v.str else { return [] }
            return s.withMemoryRebound(to: UInt8.self, capacity: v.len) {
                Array(UnsafeBufferPointer(start: $0, count: v.len))
            }
        }
        switch v.type {
        case REDIS_REPLY_STRING: return .string(bytes())
        case REDIS_REPLY_STATUS: return .status(String(decoding: bytes(), as: UTF8.self))
        case REDIS_REPLY_ERROR: return .error(String(decoding: bytes(), as: UTF8.self))
        case REDIS_REPLY_INTEGER: return .integer(Int64(v.integer))
        case REDIS_REPLY_ARRAY:
            return .array((0..<v.elements).map { copy(v.element[$0]!) })
        default: return .null
        }
    }
}
