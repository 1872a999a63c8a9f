import Testing

@testable import AuthProxyCore

private func decode(_ text: String, splitEvery: Int = Int.max) throws -> (body: String, done: Bool, rest: Int) {
    var d = ChunkedDecoder()
    var out: [UInt8] = []
    let bytes = Array(text.utf8)
    var offset = 0
    while offset < bytes.count && !d.isDone {
        let end = min(bytes.count, offset + splitEvery)
        let consumed = try bytes[offset..<end].withUnsafeBytes { raw in
            try d.decode(raw, limit: .max) { out.append(contentsOf: $0) }
        }
        offset += consumed
        if consumed == 0 { break }
    }
    return (String(decoding: out, as: UTF8.self), d.isDone, bytes.count - offset)
}

@Suite struct ChunkedDecoderTests {
    @Test func decodesAndStopsAtEnd() throws {
        let r = try decode("4\r\nWiki\r\n5;ext=1\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\n\r\nNEXT")
        #expect(r.body == "Wikipedia in\r\n\r\nchunks.")
        #expect(r.done)
        #expect(r.rest == 4)
    }

    @Test func trailerFieldsAreReadAndDropped() throws {
        let r = try decode("3\r\nabc\r\n0\r\nX-A: 1\r\nX-Empty:\r\nX-B:\tv w\u{e9}\r\n\r\nNEXT", splitEvery: 2)
        #expect(r.body == "abc")
        #expect(r.done)
        #expect(r.rest == 4)
    }

    @Test func byteByByte() throws {
        let r = try decode("a\r\n0123456789\r\n0\r\nX-Trailer: 1\r\n\r\n", splitEvery: 1)
        #expect(r.body == "0123456789")
        #expect(r.done)
    }

    @Test(arguments: [
        "g\r\nabc\r\n0\r\n\r\n",  // not hex
        "\r\n",  // empty size
        "-1\r\n",  // sign
        "0x5\r\nabcde\r\n0\r\n\r\n",  // prefix
        "1000000000000000\r\n",  // too large
        "3\nabc\r\n0\r\n\r\n",  // bare LF
        "3\r\nabcX\r\n",  // data not followed by CRLF
        "3\r\nabc\r\n0\r\nX: 1\n\r\n",  // bare LF in trailer
        // Trailers must be field lines (the corpus case: a last chunk whose CRLF is missing, then a request).
        "3\r\nabc\r\n0\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
        "0\r\n: empty-name\r\n\r\n",  // empty name
        "0\r\nX(: v\r\n\r\n",  // not a token
        "0\r\nX: 1\r\n folded\r\n\r\n",  // obs-fold
        "0\r\nNoColon\r\n\r\n",
        "0\r\nX: a\u{1}b\r\n\r\n",  // control character
    ])
    func rejects(_ text: String) {
        #expect(throws: HTTPParseError.self) { try decode(text) }
    }

    @Test func respectsOutputLimit() throws {
        var d = ChunkedDecoder()
        let bytes = Array("a\r\n0123456789\r\n0\r\n\r\n".utf8)
        var out: [UInt8] = []
        let consumed = try bytes.withUnsafeBytes { raw in
            try d.decode(raw, limit: 4) { out.append(contentsOf: $0) }
        }
        #expect(out.count == 4)
        #expect(consumed == 3 + 4)
    }

    /// The 4 KiB extension limit holds per chunk-size line, however the line is cut into writes: 200 KB of
    /// extension in 100-byte slices is refused like the same bytes in one piece (it was counted per call).
    @Test(arguments: [100, 1, Int.max])
    func anExtensionTooLongIsRefusedHoweverItArrives(splitEvery: Int) {
        let text = "5;" + String(repeating: "a", count: 200_000) + "\r\nhello\r\n0\r\n\r\n"
        #expect(throws: HTTPParseError.self) { try decode(text, splitEvery: splitEvery) }
    }

    /// Each chunk's extension is counted on its own: many chunks with extensions under the limit pass.
    @Test func extensionsUnderTheLimitOnEveryChunkPass() throws {
        let ext = ";" + String(repeating: "e", count: 4000)
        let chunk = "1" + ext + "\r\nx\r\n"
        let r = try decode(String(repeating: chunk, count: 10) + "0\r\n\r\n", splitEvery: 7)
        #expect(r.body == String(repeating: "x", count: 10))
        #expect(r.done)
    }
}
