import Testing

@testable import AuthProxyCore

/// Reads `text` as one chunk-size line, in pieces of `split` bytes; the size, or why it was refused. Bytes after
/// the LF must be left unread.
private func readLine(_ text: String, split: Int = .max) -> Result<Int64, ChunkSizeLine.Failure> {
    var line = ChunkSizeLine()
    let bytes = Array((text + "NEXT").utf8)
    var offset = 0
    while offset < bytes.count {
        let end = min(bytes.count, offset + split)
        let result: Result<(consumed: Int, size: Int64?), ChunkSizeLine.Failure> = bytes[offset..<end].withUnsafeBytes {
            raw in
            do throws(ChunkSizeLine.Failure) { return .success(try line.read(raw)) } catch { return .failure(error) }
        }
        switch result {
        case .failure(let f):
            return .failure(f)
        case .success(let r):
            let given = end - offset
            offset += r.consumed
            if let size = r.size {
                #expect(String(decoding: bytes[offset...], as: UTF8.self) == "NEXT", "\(text.debugDescription)")
                return .success(size)
            }
            #expect(r.consumed == given, "an unfinished line consumes all it is given")
        }
    }
    Issue.record("no end of line in \(text.debugDescription)")
    return .failure(.notEndedByCRLF)
}

private let long = String(repeating: "e", count: ChunkSizeLine.maxBytes)

/// Every rule of the grammar, once accepted and once refused where it has two sides.
private let table: [(String, Result<Int64, ChunkSizeLine.Failure>)] = [
    ("5\r\n", .success(5)),
    ("a\r\n", .success(10)),
    ("A\r\n", .success(10)),
    ("0\r\n", .success(0)),
    ("000\r\n", .success(0)),
    ("fffffffffffffff\r\n", .success(0xfff_ffff_ffff_ffff)),
    ("000000000000005\r\n", .success(5)),  // fifteen digits
    ("0000000000000005\r\n", .failure(.sizeTooLarge)),  // sixteen
    ("ffffffffffffffff\r\n", .failure(.sizeTooLarge)),
    ("5;name=value\r\n", .success(5)),
    ("5;a=b;c=\"d;e\"\r\n", .success(5)),
    ("5 ;x\r\n", .success(5)),
    ("5\t;x\r\n", .success(5)),
    ("5 \r\n", .success(5)),
    ("5;a\tb\r\n", .success(5)),
    ("5;\u{e9}\r\n", .success(5)),  // obs-text in an extension
    ("5 x\r\n", .failure(.invalidSize)),  // whitespace, then neither `;` nor the end
    ("\r\n", .failure(.invalidSize)),
    (" 5\r\n", .failure(.invalidSize)),
    ("+5\r\n", .failure(.invalidSize)),
    ("-5\r\n", .failure(.invalidSize)),
    ("0x5\r\n", .failure(.invalidSize)),
    ("g\r\n", .failure(.invalidSize)),
    ("5\n", .failure(.notEndedByCRLF)),
    ("5\rx\n", .failure(.notEndedByCRLF)),
    ("5;a\rb\r\n", .failure(.notEndedByCRLF)),
    ("5;a\nb\r\n", .failure(.invalidExtension)),
    ("5;a\u{0}\r\n", .failure(.invalidExtension)),
    ("5;a\u{1}\r\n", .failure(.invalidExtension)),
    ("5;a\u{7f}\r\n", .failure(.invalidExtension)),
    ("5;" + String(long.dropFirst(4)) + "\r\n", .success(5)),  // 4096 bytes with the CRLF
    ("5;" + String(long.dropFirst(3)) + "\r\n", .failure(.tooLong)),
    ("5" + String(repeating: " ", count: ChunkSizeLine.maxBytes) + "\r\n", .failure(.tooLong)),
]

@Suite struct ChunkSizeLineTests {
    @Test(arguments: table.indices, [Int.max, 1, 3])
    func theGrammar(row: Int, split: Int) {
        let (text, expected) = table[row]
        #expect(readLine(text, split: split) == expected, "\(text.prefix(40).debugDescription)")
    }

    @Test func aLineReadResetsForTheNext() throws {
        var line = ChunkSizeLine()
        let bytes = Array("1f;x\r\n3\r\n".utf8)
        let first = try bytes.withUnsafeBytes { try line.read($0) }
        #expect(first.consumed == 6 && first.size == 31)
        let second = try bytes[6...].withUnsafeBytes { try line.read($0) }
        #expect(second.consumed == 3 && second.size == 3)
    }

    /// Requests and responses read chunk-size lines with the same grammar: each row is accepted or refused by the
    /// request-body decoder and by the own client's response reader alike (rows small enough to send the chunk).
    @Test(arguments: table.indices.filter { (try? table[$0].1.get()).map { $0 <= 16 } ?? true })
    func requestsAndResponsesAgree(row: Int) {
        let (text, expected) = table[row]
        let body: String
        switch expected {
        case .success(0): body = text + "\r\n"
        case .success(let n): body = text + String(repeating: "x", count: Int(n)) + "\r\n0\r\n\r\n"
        case .failure: body = text + "x\r\n0\r\n\r\n"
        }
        let accepted = (try? expected.get()) != nil
        var decoder = ChunkedDecoder()
        let requestRead =
            (try? Array(body.utf8).withUnsafeBytes { try decoder.decode($0, limit: .max) { _ in } }) != nil
        #expect((requestRead && decoder.isDone) == accepted, "request: \(text.prefix(40).debugDescription)")
        var reader = ResponseReader(isHeadRequest: false)
        let responseRead = readResponse(&reader, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
        #expect(responseRead == accepted, "response: \(text.prefix(40).debugDescription)")
    }
}

/// Whether the reader reads `text` as one whole response.
private func readResponse(_ reader: inout ResponseReader, _ text: String) -> Bool {
    var pending = Array(text.utf8)
    while true {
        let result: Result<ResponseReader.Step, ResponseReader.Failure> = pending.withUnsafeBytes { b in
            do throws(ResponseReader.Failure) { return .success(try reader.next(b)) } catch { return .failure(error) }
        }
        guard case .success(let step) = result else { return false }
        switch step {
        case .headLine(let n), .framing(let n):
            pending.removeFirst(n)
        case .body(let n):
            reader.bodyDelivered(n)
            pending.removeFirst(n)
        case .complete:
            return true
        case .needMore, .switched:
            return false
        }
    }
}
