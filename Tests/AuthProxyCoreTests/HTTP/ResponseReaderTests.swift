import Testing

@testable import AuthProxyCore

/// Drives a ``ResponseReader`` the way ``HTTP1Transfer`` does, over input split into pieces of `split` bytes (a
/// response arriving read by read), and records what it handed on.
private struct Run {
    var lines: [String] = []
    var body: [UInt8] = []
    var complete = false
    var reusable = false
    var failure: ResponseReader.Failure? = nil
    /// Bytes left after the response.
    var leftover = 0
    /// A `101` answered the upgrade asked for.
    var switched = false

    init(_ text: String, head: Bool = false, split: Int = .max, eof: Bool = false, upgrade: Bool = false) {
        var reader = ResponseReader(isHeadRequest: head, upgradeRequested: upgrade)
        let all = Array(text.utf8)
        var pending: [UInt8] = []
        var offset = 0
        outer: while offset < all.count || pending.isEmpty == false {
            let take = min(split, all.count - offset)
            pending += all[offset..<(offset + take)]
            offset += take
            while true {
                let result: Result<(ResponseReader.Step, Int), ResponseReader.Failure> = pending.withUnsafeBytes {
                    buf in
                    do throws(ResponseReader.Failure) {
                        let step = try reader.next(buf)
                        return .success((step, 0))
                    } catch {
                        return .failure(error)
                    }
                }
                switch result {
                case .failure(let f):
                    failure = f
                    return
                case .success((let step, _)):
                    switch step {
                    case .headLine(let n):
                        lines.append(String(decoding: pending[0..<n], as: UTF8.self))
                        pending.removeFirst(n)
                    case .framing(let n):
                        pending.removeFirst(n)
                    case .body(let n):
                        body += pending[0..<n]
                        reader.bodyDelivered(n)
                        pending.removeFirst(n)
                    case .complete:
                        complete = true
                        reusable = reader.reusable
                        leftover = pending.count + (all.count - offset)
                        return
                    case .needMore:
                        if offset >= all.count { break outer }
                        continue outer
                    case .switched:
                        switched = true
                        leftover = pending.count + (all.count - offset)
                        return
                    }
                }
            }
        }
        if eof {
            do throws(ResponseReader.Failure) {
                try reader.endOfInput()
                complete = reader.isComplete
                reusable = reader.reusable
            } catch {
                failure = error
            }
        }
    }
}

@Suite struct ResponseReaderTests {
    static let splits = [Int.max, 1, 3, 7]

    @Test(arguments: splits) func switchingProtocolsAnswersAnUpgradeRequest(split: Int) {
        // The head is handed on line by line; the frame bytes behind it are left for the relay.
        let r = Run(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\u{81}\u{2}hi",
            split: split, upgrade: true)
        #expect(r.failure == nil)
        #expect(r.switched && !r.complete && !r.reusable)
        #expect(
            r.lines == [
                "HTTP/1.1 101 Switching Protocols\r\n", "Upgrade: websocket\r\n", "Connection: Upgrade\r\n", "\r\n",
            ])
        #expect(r.leftover == 5)  // U+0081 is two bytes in UTF-8
    }

    @Test func anUpgradeRequestMayStillGetAnOrdinaryAnswer() {
        let r = Run("HTTP/1.1 498 Invalid Token\r\nContent-Length: 2\r\n\r\n{}", upgrade: true)
        #expect(r.failure == nil && r.complete && !r.switched && r.body == Array("{}".utf8))
    }

    @Test func anUnrequested101IsStillRefused() {
        let r = Run("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n")
        #expect(r.failure == .unexpectedSwitchingProtocols && !r.switched)
    }

    @Test(arguments: splits) func contentLengthBodyIsReadAndTheConnectionKept(split: Int) {
        let r = Run("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX: y\r\n\r\nhello", split: split)
        #expect(r.failure == nil)
        #expect(r.lines == ["HTTP/1.1 200 OK\r\n", "Content-Length: 5\r\n", "X: y\r\n", "\r\n"])
        #expect(r.body == Array("hello".utf8))
        #expect(r.complete && r.reusable)
    }

    @Test(arguments: splits) func chunkedBodyIsDechunkedAndTrailersDropped(split: Int) {
        let r = Run(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\nA\r\n0123456789\r\n0\r\nT: 1\r\n\r\n",
            split: split)
        #expect(r.failure == nil)
        #expect(r.body == Array("hello0123456789".utf8))
        #expect(r.lines.count == 3)
        #expect(r.complete && r.reusable)
    }

    @Test func bytesAfterTheResponseAreLeftOver() {
        let r = Run("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n")
        #expect(r.complete && r.leftover > 0)
    }

    @Test func closeDelimitedBodyEndsAtEOFAndIsNotReused() {
        let r = Run("HTTP/1.1 200 OK\r\n\r\nall of it", eof: true)
        #expect(r.body == Array("all of it".utf8))
        #expect(r.complete && !r.reusable)
    }

    @Test(arguments: [
        "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
        "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
    ])
    func bodilessStatusesHaveNoBodyAndEndTheConnection(head: String) {
        let r = Run(head + "hello")
        #expect(r.complete && !r.reusable && r.body.isEmpty && r.leftover == 5)
    }

    @Test func headRequestHasNoBody() {
        let r = Run("HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n", head: true)
        #expect(r.complete && !r.reusable && r.body.isEmpty)
    }

    @Test func interimResponsesArePassedOnBeforeTheFinalOne() {
        let r = Run(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx"
        )
        #expect(r.lines.first == "HTTP/1.1 100 Continue\r\n")
        #expect(r.lines.contains("HTTP/1.1 200 OK\r\n"))
        #expect(r.body == [120] && r.reusable)
    }

    @Test func connectionCloseAndHTTP10AreNotReused() {
        #expect(!Run("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx").reusable)
        #expect(!Run("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx").reusable)
        #expect(Run("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx").reusable)
    }

    @Test func chunkedWinsOverContentLengthAndTheConnectionIsClosed() {
        let r = Run("HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n")
        #expect(r.body == Array("ok".utf8))
        #expect(r.complete && !r.reusable)
    }

    @Test func statusIsReadAsLibcurlReadsIt() {
        // The assembler reads these as 204; the reader frames them as 204 (no body) too.
        for line in ["HTTP/1.1  204 No Content", "HTTP/1.1 204\tNo Content", "HTTP/1.1 204OK"] {
            let r = Run(line + "\r\nContent-Length: 5\r\n\r\n")
            #expect(r.complete && r.body.isEmpty, "\(line)")
        }
    }

    @Test(arguments: [
        ("HTTP/2 200 OK\r\n\r\n", ResponseReader.Failure.invalidStatusLine),
        ("HTTP/1.1 2000 OK\r\n\r\n", .invalidStatusLine),
        ("ICY 200 OK\r\n\r\n", .invalidStatusLine),
        ("HTTP/1.1 101 Switching Protocols\r\n\r\n", .unexpectedSwitchingProtocols),
        ("HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", .lineWithoutColon),
        ("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello", .invalidContentLength),
        ("HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello", .invalidContentLength),
        ("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n 6\r\n\r\nhello", .foldedFramingField),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", .invalidTransferEncoding),
        (
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            .invalidTransferEncoding
        ),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nx\r\n", .invalidChunk),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n", .invalidChunk),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1000000000000000\r\n", .invalidChunk),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokXX", .invalidChunk),
        ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;a\rb\r\nok\r\n", .invalidChunk),
    ])
    func malformedResponsesAreRefused(text: String, failure: ResponseReader.Failure) {
        for split in Self.splits {
            #expect(Run(text, split: split).failure == failure, "split \(split): \(text.debugDescription)")
        }
    }

    @Test func oversizedHeadIsRefusedWithoutWaitingForItsEnd() {
        let big = "HTTP/1.1 200 OK\r\nX: " + String(repeating: "a", count: ResponseReader.maxHead + 1)
        #expect(Run(big).failure == .headTooLarge)
        #expect(Run(big, split: 4096).failure == .headTooLarge)
    }

    @Test func chunkLineLimitIsPerChunk() {
        // Long extensions spread over many small reads are counted per chunk line, not per read.
        let ext = String(repeating: "e", count: ChunkSizeLine.maxBytes)
        let r = Run("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;" + ext + "\r\nx\r\n0\r\n\r\n", split: 100)
        #expect(r.failure == .invalidChunk)
    }

    @Test func endOfInputTellsNothingFromTruncated() {
        #expect(Run("", eof: true).failure == .nothing)
        #expect(Run("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel", eof: true).failure == .truncated)
        #expect(Run("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", eof: true).failure == .truncated)
        #expect(Run("HTTP/1.1 200 OK\r\nContent-Le", eof: true).failure == .truncated)
    }

    @Test func interimStormIsBounded() {
        let storm = String(repeating: "HTTP/1.1 100 Continue\r\n\r\n", count: ResponseReader.maxInterim + 1)
        #expect(Run(storm + "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").failure == .tooManyInterimResponses)
    }
}
