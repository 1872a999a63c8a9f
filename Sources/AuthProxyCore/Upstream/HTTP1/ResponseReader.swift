#if canImport(Glibc)
    import Glibc
#endif

/// Reads one upstream HTTP/1.1 response from the bytes of its connection, for the proxy's own client
/// (``HTTP1Transfer``): finds each head line, decides how the body is delimited (RFC 9112 §6.3) and walks a
/// chunked body. It copies nothing: each ``Step`` names a count of bytes at the start of the input the caller
/// holds, and the caller consumes them.
///
/// As strict as the request parser: a status line that is not `HTTP/1.x SP 3DIGIT [SP reason]`, a head line
/// without a colon, a framing field (`Content-Length`, `Transfer-Encoding`, `Connection`) that is invalid,
/// conflicting or folded, a `101` the proxy never asked for, a chunk-size line ``ChunkSizeLine`` refuses, a chunk
/// not followed by CRLF, or heads, chunk lines and trailers over their limits all throw. The caller then fails
/// the exchange with a 502 and closes the connection: nothing of a response that could be framed two ways
/// reaches the client. Other field checks (names, values, the reason phrase) are the
/// ``ResponseHeadAssembler``'s, which sees every head line before the client does.
///
/// A connection can carry another request only when the response was framed by length or chunks, asked for
/// nothing else (`Connection: close`, HTTP/1.0 without keep-alive) and was not an answer to HEAD or a 204/304:
/// bytes after those could not be told from a late body, as libcurl also decides.
struct ResponseReader {
    enum Step: Equatable {
        /// A head line of this many bytes (its LF included) starts the input: hand it on, then consume it.
        case headLine(Int)
        /// Framing bytes (chunk-size lines, CRLFs after chunks, trailers) start the input: consume them.
        case framing(Int)
        /// Body bytes start the input: hand them on, and call ``bodyDelivered(_:)`` for what was taken.
        case body(Int)
        /// The response is complete; ``reusable`` says whether the connection may carry another request.
        case complete
        /// Nothing more can be read from the input given.
        case needMore
        /// A `101` answered the upgrade the request asked for, its head handed on: every byte after it belongs to
        /// the new protocol (the connection is the client's byte relay from now on, never pooled).
        case switched
    }

    enum Failure: Error, Equatable, CustomStringConvertible {
        case invalidStatusLine
        case unexpectedSwitchingProtocols
        case tooManyInterimResponses
        case headTooLarge
        case lineWithoutColon
        case foldedFramingField
        case invalidContentLength
        case invalidTransferEncoding
        case invalidChunk
        case trailersTooLarge
        /// The connection ended before a byte of the response.
        case nothing
        /// The connection ended inside the response.
        case truncated

        var description: String {
            switch self {
            case .invalidStatusLine: return "an invalid status line"
            case .unexpectedSwitchingProtocols: return "101 Switching Protocols without an upgrade request"
            case .tooManyInterimResponses: return "more than \(ResponseReader.maxInterim) interim (1xx) responses"
            case .headTooLarge: return "a response head over \(ResponseReader.maxHead / 1024) KiB"
            case .lineWithoutColon: return "a header line without a colon"
            case .foldedFramingField: return "a folded Content-Length, Transfer-Encoding or Connection field"
            case .invalidContentLength: return "an invalid or conflicting Content-Length"
            case .invalidTransferEncoding: return "a Transfer-Encoding whose last coding is not a single chunked"
            case .invalidChunk: return "an invalid chunk"
            case .trailersTooLarge: return "trailers over \(ResponseReader.maxHead / 1024) KiB"
            case .nothing: return "the connection closed without a response"
            case .truncated: return "the connection closed inside the response"
            }
        }
    }

    /// Bytes one head (or the trailers) may have.
    static let maxHead = 64 * 1024
    /// Interim responses before the final one.
    static let maxInterim = 1000

    private enum State: Equatable {
        case statusLine
        case fields
        /// The blank line ending a head was handed on; the framing is decided at the next step, so the
        /// ``ResponseHeadAssembler`` sees the whole head (and refuses it with its own reason) first.
        case headEnd
        case lengthBody(Int64)
        case chunkSize
        case chunkData(Int64)
        case chunkEnd
        case trailers
        case untilClose
        case done
        case switched
    }

    private enum FramingField { case none, contentLength, transferEncoding, connection }

    private var state = State.statusLine
    private let isHeadRequest: Bool
    /// The status of the head being read.
    private(set) var status = 0
    private var minorVersion = 1
    private var headBytes = 0
    private var interim = 0
    private var contentLength: Int64? = nil
    private var transferEncoding = false
    private var lastCodingChunked = false
    private var connectionClose = false
    private var connectionKeepAlive = false
    /// A `Content-Length` was invalid or conflicting (refused when the head ends).
    private var lengthInvalid = false
    private var lastField = FramingField.none
    /// The chunk-size line being read (``ChunkSizeLine``: the grammar chunked request bodies are read with too).
    private var sizeLine = ChunkSizeLine()
    /// Some byte of the response arrived.
    private(set) var receivedAny = false
    /// Set when the response is complete: whether the connection may carry another request.
    private(set) var reusable = false

    /// Whether a connection may carry another request after an answer without a body (HEAD, 204, 304). Not on
    /// a shared pool: bytes a server sends late after such an answer could not be told from the next response.
    /// Yes on a client's own connections (``OwnUpstreams``), where an NTLM login lives on the connection and
    /// late bytes could only reach that client.
    private let reuseAfterBodiless: Bool

    /// The request asked for an upgrade (a WebSocket handshake): a `101` may answer it. Any other `101` is refused.
    private let upgradeRequested: Bool

    init(isHeadRequest: Bool, reuseAfterBodiless: Bool = false, upgradeRequested: Bool = false) {
        self.isHeadRequest = isHeadRequest
        self.reuseAfterBodiless = reuseAfterBodiless
        self.upgradeRequested = upgradeRequested
    }

    var isComplete: Bool { state == .done }

    /// Whether the final head has been read (body bytes may follow).
    var inBody: Bool {
        switch state {
        case .statusLine, .fields, .headEnd, .switched: return false
        default: return true
        }
    }

    /// The next step for `input`, the unconsumed bytes of the connection.
    mutating func next(_ input: UnsafeRawBufferPointer) throws(Failure) -> Step {
        if !input.isEmpty { receivedAny = true }
        switch state {
        case .statusLine, .fields:
            guard let n = Self.lineLength(input) else {
                if headBytes + input.count > Self.maxHead { throw .headTooLarge }
                return .needMore
            }
            headBytes += n
            if headBytes > Self.maxHead { throw .headTooLarge }
            try headLine(UnsafeRawBufferPointer(rebasing: input[0..<n]))
            return .headLine(n)
        case .headEnd:
            try endOfHead()
            return try next(input)
        case .lengthBody(let remaining):
            if input.isEmpty { return .needMore }
            return .body(Int(min(Int64(input.count), remaining)))
        case .chunkData(let remaining):
            if input.isEmpty { return .needMore }
            return .body(Int(min(Int64(input.count), remaining)))
        case .untilClose:
            return input.isEmpty ? .needMore : .body(input.count)
        case .chunkSize:
            let line: (consumed: Int, size: Int64?)
            do throws(ChunkSizeLine.Failure) {
                line = try sizeLine.read(input)
            } catch {
                throw .invalidChunk
            }
            guard let size = line.size else { return line.consumed == 0 ? .needMore : .framing(line.consumed) }
            if size == 0 {
                headBytes = 0
                state = .trailers
            } else {
                state = .chunkData(size)
            }
            return .framing(line.consumed)
        case .chunkEnd:
            if input.count < 2 {
                if input.count == 1, input[0] != 13 { throw .invalidChunk }
                return .needMore
            }
            guard input[0] == 13, input[1] == 10 else { throw .invalidChunk }
            state = .chunkSize
            return .framing(2)
        case .trailers:
            guard let n = Self.lineLength(input) else {
                if headBytes + input.count > Self.maxHead { throw .trailersTooLarge }
                return .needMore
            }
            headBytes += n
            if headBytes > Self.maxHead { throw .trailersTooLarge }
            if n == 2 && input[0] == 13 || n == 1 {
                finish(reusable: keepsAlive)
            }
            return .framing(n)
        case .done:
            return .complete
        case .switched:
            return .switched
        }
    }

    /// `count` body bytes were handed on.
    mutating func bodyDelivered(_ count: Int) {
        switch state {
        case .lengthBody(let remaining):
            let left = remaining - Int64(count)
            if left == 0 { finish(reusable: keepsAlive) } else { state = .lengthBody(left) }
        case .chunkData(let remaining):
            let left = remaining - Int64(count)
            state = left == 0 ? .chunkEnd : .chunkData(left)
        default:
            break
        }
    }

    /// The connection ended (EOF): completes a response delimited by the close, throws otherwise.
    mutating func endOfInput() throws(Failure) {
        switch state {
        case .untilClose:
            finish(reusable: false)
        case .done:
            break
        case .statusLine where !receivedAny:
            throw .nothing
        default:
            throw .truncated
        }
    }

    // MARK: head

    private var keepsAlive: Bool {
        minorVersion >= 1 ? !connectionClose : connectionKeepAlive && !connectionClose
    }

    private mutating func finish(reusable: Bool) {
        state = .done
        self.reusable = reusable
    }

    private mutating func headLine(_ raw: UnsafeRawBufferPointer) throws(Failure) {
        var end = raw.count - 1
        if end > 0, raw[end - 1] == 13 { end -= 1 }
        let line = UnsafeRawBufferPointer(rebasing: raw[0..<end])
        if state == .statusLine {
            try statusLine(line)
            state = .fields
            return
        }
        if line.isEmpty {
            state = .headEnd
            return
        }
        if line[0] == 32 || line[0] == 9 {
            // obs-fold: the assembler joins it to the field before; never for a field the framing depends on.
            if lastField != .none { throw .foldedFramingField }
            return
        }
        guard let colon = line.firstIndex(of: 58) else { throw .lineWithoutColon }
        let name = UnsafeRawBufferPointer(rebasing: line[0..<colon])
        let value = ResponseHeadAssembler.trimmed(UnsafeRawBufferPointer(rebasing: line[(colon + 1)...]))
        if ResponseHeadAssembler.equalsIgnoringCase(name, "content-length") {
            lastField = .contentLength
            guard case .value(let n) = ResponseHeadAssembler.readLength(value) else {
                lengthInvalid = true
                return
            }
            if let seen = contentLength, seen != n { lengthInvalid = true }
            contentLength = n
        } else if ResponseHeadAssembler.equalsIgnoringCase(name, "transfer-encoding") {
            lastField = .transferEncoding
            try codings(value)
        } else if ResponseHeadAssembler.equalsIgnoringCase(name, "connection") {
            lastField = .connection
            Self.forEachToken(value) { t in
                if ResponseHeadAssembler.equalsIgnoringCase(t, "close") { connectionClose = true }
                if ResponseHeadAssembler.equalsIgnoringCase(t, "keep-alive") { connectionKeepAlive = true }
            }
        } else {
            lastField = .none
        }
    }

    /// `HTTP/1.0` or `HTTP/1.1`, a space, then the status code as the ``ResponseHeadAssembler`` reads it (libcurl's
    /// reading, whitespace before the code and a phrase after a tab included): the body is framed by the status the
    /// client is given.
    private mutating func statusLine(_ line: UnsafeRawBufferPointer) throws(Failure) {
        // "HTTP/1."
        guard line.count >= 12, line[0] == 72, line[1] == 84, line[2] == 84, line[3] == 80, line[4] == 47,
            line[5] == 49, line[6] == 46, line[7] == 48 || line[7] == 49, line[8] == 32,
            let (code, _) = ResponseHeadAssembler.statusCode(line)
        else { throw .invalidStatusLine }
        minorVersion = Int(line[7] - 48)
        status = code
        if status == 101, !upgradeRequested { throw .unexpectedSwitchingProtocols }
        contentLength = nil
        lengthInvalid = false
        transferEncoding = false
        lastCodingChunked = false
        connectionClose = false
        connectionKeepAlive = false
        lastField = .none
    }

    private mutating func endOfHead() throws(Failure) {
        if lengthInvalid { throw .invalidContentLength }
        if status == 101 {
            // Only reached when the request asked for it (``statusLine(_:)``). Not reusable: the connection now
            // speaks the upgraded protocol.
            state = .switched
            return
        }
        if status < 200 {
            interim += 1
            if interim > Self.maxInterim { throw .tooManyInterimResponses }
            headBytes = 0
            state = .statusLine
            return
        }
        if isHeadRequest || status == 204 || status == 304 {
            finish(reusable: reuseAfterBodiless && keepsAlive)
            return
        }
        if transferEncoding {
            guard lastCodingChunked else {
                // RFC 9112 §6.3: a response with another final coding is delimited by the close.
                state = .untilClose
                return
            }
            // Both fields: Transfer-Encoding wins, and the connection is not used again (RFC 9112 §6.3).
            if contentLength != nil { connectionClose = true }
            state = .chunkSize
            return
        }
        if let n = contentLength {
            if n == 0 { finish(reusable: keepsAlive) } else { state = .lengthBody(n) }
            return
        }
        state = .untilClose
    }

    /// A `Transfer-Encoding` value: `chunked` may appear once, last (RFC 9112 §6.1).
    private mutating func codings(_ value: UnsafeRawBufferPointer) throws(Failure) {
        var failed = false
        var any = false
        Self.forEachToken(value) { t in
            any = true
            if lastCodingChunked { failed = true }
            if ResponseHeadAssembler.equalsIgnoringCase(t, "chunked") {
                lastCodingChunked = true
            } else if !t.allSatisfy(isTokenChar) {
                failed = true
            }
        }
        if failed || !any { throw .invalidTransferEncoding }
        transferEncoding = true
    }

    /// Calls `body` with each non-empty element of a comma-separated list, trimmed.
    private static func forEachToken(_ value: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) -> Void) {
        var start = 0
        while start <= value.count {
            var stop = start
            while stop < value.count, value[stop] != 44 { stop += 1 }
            let t = ResponseHeadAssembler.trimmed(UnsafeRawBufferPointer(rebasing: value[start..<stop]))
            if !t.isEmpty { body(t) }
            start = stop + 1
        }
    }

    // MARK: lines

    /// The length of the first line in `input`, its LF included; nil when there is no LF yet.
    static func lineLength(_ input: UnsafeRawBufferPointer) -> Int? {
        guard let base = input.baseAddress, !input.isEmpty,
            let p = memchr(base, 10, input.count)
        else { return nil }
        return UnsafeRawPointer(p) - base + 1
    }
}
