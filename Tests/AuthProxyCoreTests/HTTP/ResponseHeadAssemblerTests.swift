import Testing

@testable import AuthProxyCore

/// What the String path decided about framing, and the same three facts of a ``ResponseFraming``.
struct FramingShape: Equatable {
    var noBody: Bool
    var chunked: Bool
    var keepAlive: Bool

    init(noBody: Bool, chunked: Bool, keepAlive: Bool) {
        self.noBody = noBody
        self.chunked = chunked
        self.keepAlive = keepAlive
    }

    init(_ f: ResponseFraming) {
        self.init(noBody: f.noBody, chunked: f.chunked, keepAlive: f.keepAlive)
    }
}

/// The String path `ResponseHeadAssembler` replaces, transcribed from `ClientConnection+Upstream.swift`
/// (`transferDidReceiveHeaderLine` and `commitResponseHead` at af7e6a4) with the connection state it reads made
/// explicit, so both can be fed the same lines and compared byte for byte.
private struct StringPath {
    let options: ResponseHeadAssembler.Options
    let answersChallenges: Bool
    var responseStatus = 0
    var responseReason = ""
    var responseHeaders = HTTPHeaders()
    var committed: (head: String, framing: FramingShape)? = nil

    init(options: ResponseHeadAssembler.Options, answersChallenges: Bool) {
        self.options = options
        self.answersChallenges = answersChallenges
    }

    mutating func headerLine(_ raw: [UInt8]) {
        guard committed == nil else { return }  // trailers
        var end = raw.count
        while end > 0, raw[end - 1] == 10 || raw[end - 1] == 13 { end -= 1 }
        let line = raw[0..<end]
        if line.starts(with: "HTTP/".utf8) {
            let text = String(decoding: line, as: UTF8.self)
            let parts = text.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
            responseStatus = parts.count > 1 ? Int(parts[1]) ?? 502 : 502
            responseReason = parts.count > 2 ? String(parts[2]) : reasonPhrase(responseStatus)
            responseHeaders = HTTPHeaders()
            return
        }
        if line.isEmpty {
            if responseStatus >= 200, !(answersChallenges && (responseStatus == 401 || responseStatus == 407)) {
                commit()
            }
            return
        }
        if line[line.startIndex] == 32 || line[line.startIndex] == 9 {
            responseHeaders.continueLast(with: String(decoding: line, as: UTF8.self).trimmingHTTPWhitespace())
            return
        }
        guard let colon = line.firstIndex(of: 58) else { return }
        let name = String(decoding: line[line.startIndex..<colon], as: UTF8.self)
        let value = String(decoding: line[(colon + 1)...], as: UTF8.self).trimmingHTTPWhitespace()
        responseHeaders.add(name: name, value: String(value))
    }

    /// `transferDidFinish` without an error.
    mutating func finish() {
        guard committed == nil else { return }
        if responseStatus < 200 {
            responseStatus = 502
            responseReason = "Bad Gateway"
        }
        commit()
    }

    mutating func commit() {
        var keepAlive = options.keepAlive
        var chunked = false
        let status = responseStatus
        let noBody = options.isHeadRequest || status == 204 || status == 304 || status < 200
        var out = responseHeaders.removingHopByHop()
        let lengths = out.values("content-length")
        out.remove(name: "content-length")
        var length: Int64? = nil
        if !responseHeaders.contains("transfer-encoding"), let first = lengths.first,
            lengths.allSatisfy({ $0 == first }),
            let n = Int64(first), n >= 0
        {
            length = n
        }
        if noBody {
            if let length, status != 204 { out.add(name: "Content-Length", value: String(length)) }
        } else if let length {
            out.add(name: "Content-Length", value: String(length))
        } else if options.clientMinorVersion >= 1 {
            out.add(name: "Transfer-Encoding", value: "chunked")
            chunked = true
        } else {
            keepAlive = false
        }
        out.add(name: "Via", value: options.via)
        if let o = options.corsOrigin {
            out.remove(name: "access-control-allow-origin")
            out.add(name: "Access-Control-Allow-Origin", value: o)
            out.add(name: "Vary", value: "Origin")
        }
        if !keepAlive {
            out.add(name: "Connection", value: "close")
        } else if options.clientMinorVersion == 0 {
            out.add(name: "Connection", value: "keep-alive")
        }
        var s = "HTTP/1.1 \(status) \(responseReason)\r\n"
        for f in out { s += "\(f.name): \(f.value)\r\n" }
        s += "\r\n"
        committed = (s, FramingShape(noBody: noBody, chunked: chunked, keepAlive: keepAlive))
    }
}

/// Feeds `lines` to an assembler the way the connection does: until a final head ends, then writes it; at the end
/// of the transfer, a head that never became final is answered as 502.
private func assemble(
    _ lines: [String], options: ResponseHeadAssembler.Options, answersChallenges: Bool = false,
    assembler a: inout ResponseHeadAssembler
) -> (head: String, framing: FramingShape) {
    var out = ByteBuffer()
    var framing: FramingShape? = nil
    for line in lines {
        guard framing == nil else { break }
        let kind = Array(line.utf8).withUnsafeBytes { a.add(line: $0) }
        if kind == .end, a.isFinal(answersChallenges: answersChallenges) {
            framing = FramingShape(a.write(into: &out, options: options))
        }
    }
    if framing == nil {
        if a.status < 200 { a.substituteStatus(502) }
        framing = FramingShape(a.write(into: &out, options: options))
    }
    return (String(decoding: out.unreadBytes, as: UTF8.self), framing!)
}

private func viaStringPath(_ lines: [String], options: ResponseHeadAssembler.Options, answersChallenges: Bool = false)
    -> (head: String, framing: FramingShape)
{
    var p = StringPath(options: options, answersChallenges: answersChallenges)
    for line in lines { p.headerLine(Array(line.utf8)) }
    p.finish()
    return p.committed!
}

private func makeOptions(head: Bool = false, minor: Int = 1, keepAlive: Bool = true, cors: String? = nil)
    -> ResponseHeadAssembler.Options
{
    ResponseHeadAssembler.Options(
        isHeadRequest: head, clientMinorVersion: minor, keepAlive: keepAlive,
        corsOrigin: cors, via: "1.1 authproxy")
}

/// One upstream head (as libcurl's header callback delivers it, CRLF per line) and the client head it becomes.
struct HeadCase: CustomTestStringConvertible, Sendable {
    let name: String
    let lines: [String]
    let isHead: Bool
    let minor: Int
    let keepAlive: Bool
    let cors: String?
    let answersChallenges: Bool
    let expected: String
    let framing: FramingShape

    init(
        _ name: String, _ lines: [String], head: Bool = false, minor: Int = 1, keepAlive: Bool = true,
        cors: String? = nil, answersChallenges: Bool = false, expected: String, noBody: Bool = false,
        chunked: Bool = false, keepsAlive: Bool = true
    ) {
        self.name = name
        self.lines = lines.map { $0 + "\r\n" }
        isHead = head
        self.minor = minor
        self.keepAlive = keepAlive
        self.cors = cors
        self.answersChallenges = answersChallenges
        self.expected = expected
        framing = FramingShape(noBody: noBody, chunked: chunked, keepAlive: keepsAlive)
    }

    var testDescription: String { name }
    var options: ResponseHeadAssembler.Options {
        makeOptions(head: isHead, minor: minor, keepAlive: keepAlive, cors: cors)
    }
}

private let via = "Via: 1.1 authproxy\r\n"

let headCases: [HeadCase] = [
    HeadCase(
        "plain 200 with Content-Length",
        ["HTTP/1.1 200 OK", "Content-Type: application/json", "Content-Length: 2023", "ETag: \"abc\"", ""],
        expected: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nETag: \"abc\"\r\nContent-Length: 2023\r\n" + via
            + "\r\n"),
    HeadCase(
        "chunked upstream, HTTP/1.1 client",
        ["HTTP/1.1 200 OK", "Transfer-Encoding: chunked", "Content-Type: text/plain", ""],
        expected: "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n" + via + "\r\n",
        chunked: true),
    HeadCase(
        "Transfer-Encoding and Content-Length: the length is ignored",
        ["HTTP/1.1 200 OK", "Content-Length: 10", "Transfer-Encoding: chunked", ""],
        expected: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n" + via + "\r\n", chunked: true),
    HeadCase(
        "two equal Content-Lengths",
        ["HTTP/1.1 200 OK", "Content-Length: 5", "X-A: 1", "content-length: 5", ""],
        expected: "HTTP/1.1 200 OK\r\nX-A: 1\r\nContent-Length: 5\r\n" + via + "\r\n"),
    HeadCase(
        "two different Content-Lengths: no agreed length",
        ["HTTP/1.1 200 OK", "Content-Length: 5", "Content-Length: 6", ""],
        expected: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n" + via + "\r\n", chunked: true),
    HeadCase(
        "different Content-Length values (such a head is flagged and never relayed: invalidHeadsAreFlagged)",
        ["HTTP/1.1 200 OK", "Content-Length: 5", "Content-Length: 6", ""],
        expected: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n" + via + "\r\n", chunked: true),
    HeadCase(
        "invalid and negative Content-Length",
        ["HTTP/1.1 200 OK", "Content-Length: -1", ""],
        expected: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n" + via + "\r\n", chunked: true),
    HeadCase(
        "HEAD: no body, the length is kept",
        ["HTTP/1.1 200 OK", "Content-Length: 2023", "Content-Type: application/json", ""], head: true,
        expected: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2023\r\n" + via + "\r\n",
        noBody: true),
    HeadCase(
        "HEAD without a length: nothing added",
        ["HTTP/1.1 200 OK", "Content-Type: text/html", ""], head: true,
        expected: "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n" + via + "\r\n", noBody: true),
    HeadCase(
        "204 with Content-Length: dropped",
        ["HTTP/1.1 204 No Content", "Content-Length: 0", "X-Request-Id: 7", ""],
        expected: "HTTP/1.1 204 No Content\r\nX-Request-Id: 7\r\n" + via + "\r\n", noBody: true),
    HeadCase(
        "304 keeps its Content-Length",
        ["HTTP/1.1 304 Not Modified", "ETag: \"x\"", "Content-Length: 120", ""],
        expected: "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\nContent-Length: 120\r\n" + via + "\r\n", noBody: true),
    HeadCase(
        "1xx, then 200",
        [
            "HTTP/1.1 100 Continue", "", "HTTP/1.1 103 Early Hints", "Link: </a.css>; rel=preload", "",
            "HTTP/1.1 200 OK", "Content-Length: 3", "",
        ],
        expected: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n" + via + "\r\n"),
    HeadCase(
        "401 challenge libcurl answers, then 200",
        [
            "HTTP/1.1 401 Unauthorized", "WWW-Authenticate: Digest realm=\"r\", nonce=\"n\"", "Content-Length: 12", "",
            "HTTP/1.1 200 OK", "Content-Length: 2", "X-Remote-User: alice", "",
        ], answersChallenges: true,
        expected: "HTTP/1.1 200 OK\r\nX-Remote-User: alice\r\nContent-Length: 2\r\n" + via + "\r\n"),
    HeadCase(
        "401 without a network credential is the answer",
        ["HTTP/1.1 401 Unauthorized", "WWW-Authenticate: Basic realm=\"r\"", "Content-Length: 12", ""],
        expected: "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"r\"\r\nContent-Length: 12\r\n" + via
            + "\r\n"),
    HeadCase(
        "obs-fold continuation lines join the previous field",
        ["HTTP/1.1 200 OK", "X-Long: first", " second  ", "\tthird", "Content-Length: 0", ""],
        expected: "HTTP/1.1 200 OK\r\nX-Long: first second third\r\nContent-Length: 0\r\n" + via + "\r\n"),
    HeadCase(
        "obs-fold of a Connection field names more fields",
        ["HTTP/1.1 200 OK", "Connection: x-a,", " x-b", "X-A: 1", "X-B: 2", "X-C: 3", "Content-Length: 0", ""],
        expected: "HTTP/1.1 200 OK\r\nX-C: 3\r\nContent-Length: 0\r\n" + via + "\r\n"),
    HeadCase(
        "Connection: close and a field it names; every hop-by-hop field goes",
        [
            "HTTP/1.1 200 OK", "Connection: close, X-Secret", "X-Secret: s", "x-secret: t", "Keep-Alive: timeout=5",
            "Proxy-Authenticate: Basic", "Proxy-Connection: X-Other", "X-Other: o", "TE: trailers", "Trailer: X-T",
            "Upgrade: h2c", "Set-Cookie: a=1", "Set-Cookie: b=2", "Content-Length: 4", "",
        ],
        expected: "HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 4\r\n" + via + "\r\n"),
    HeadCase(
        "a Content-Length named in Connection does not count",
        ["HTTP/1.1 200 OK", "Connection: content-length", "Content-Length: 4", ""],
        expected: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n" + via + "\r\n", chunked: true),
    HeadCase(
        "HTTP/1.0 client, no length: close-delimited",
        ["HTTP/1.1 200 OK", "Content-Type: text/plain", ""], minor: 0,
        expected: "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n" + via + "Connection: close\r\n\r\n",
        keepsAlive: false),
    HeadCase(
        "HTTP/1.0 client with a length: keep-alive said explicitly",
        ["HTTP/1.1 200 OK", "Content-Length: 3", ""], minor: 0,
        expected: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n" + via + "Connection: keep-alive\r\n\r\n"),
    HeadCase(
        "a request that closes: Connection: close",
        ["HTTP/1.1 200 OK", "Content-Length: 3", ""], keepAlive: false,
        expected: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n" + via + "Connection: close\r\n\r\n", keepsAlive: false),
    HeadCase(
        "CORS origin replaces the upstream's",
        [
            "HTTP/1.1 200 OK", "Access-Control-Allow-Origin: *", "Content-Type: application/json",
            "access-control-allow-origin: https://evil.example", "Content-Length: 2", "",
        ],
        cors: "https://maps.example.test",
        expected: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n" + via
            + "Access-Control-Allow-Origin: https://maps.example.test\r\nVary: Origin\r\n\r\n"),
    HeadCase(
        "without CORS the upstream's Access-Control-Allow-Origin stays",
        ["HTTP/1.1 200 OK", "Access-Control-Allow-Origin: *", "Content-Length: 2", ""],
        expected: "HTTP/1.1 200 OK\r\nAccess-Control-Allow-Origin: *\r\nContent-Length: 2\r\n" + via + "\r\n"),
    HeadCase(
        "empty values",
        ["HTTP/1.1 200 OK", "X-Empty:", "X-Spaces:    ", "X-Tab:\t", "Content-Length: 0", ""],
        expected: "HTTP/1.1 200 OK\r\nX-Empty: \r\nX-Spaces: \r\nX-Tab: \r\nContent-Length: 0\r\n" + via + "\r\n"),
    HeadCase(
        "no reason phrase: the standard one",
        ["HTTP/1.1 200", "Content-Length: 0", ""],
        expected: "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n" + via + "\r\n"),
    HeadCase(
        "empty reason phrase stays empty; an unusual one is relayed",
        ["HTTP/1.1 299 ", "Content-Length: 0", ""],
        expected: "HTTP/1.1 299 \r\nContent-Length: 0\r\n" + via + "\r\n"),
    HeadCase(
        "reason phrase with spaces",
        ["HTTP/1.1 498 Invalid Token  Here", "Content-Length: 0", ""],
        expected: "HTTP/1.1 498 Invalid Token  Here\r\nContent-Length: 0\r\n" + via + "\r\n"),
    HeadCase(
        "a status that is not a number becomes 502",
        ["HTTP/1.1 2x0 Odd", "Content-Length: 0", ""],
        expected: "HTTP/1.1 502 Odd\r\nContent-Length: 0\r\n" + via + "\r\n"),
    HeadCase(
        "names keep their case; lines without colon go (a name with a space before the colon, or an empty one, is "
            + "written as is, but such a head is flagged and never relayed: invalidHeadsAreFlagged)",
        ["HTTP/1.1 200 OK", "x-LoWeR: v", "Odd : v2", "no colon here", ": empty name", "Content-Length: 0", ""],
        expected: "HTTP/1.1 200 OK\r\nx-LoWeR: v\r\nOdd : v2\r\n: empty name\r\nContent-Length: 0\r\n" + via + "\r\n"),
    HeadCase(
        "bare LF and stray CRs at line ends",
        ["HTTP/1.1 200 OK\r", "X-A: 1\r\r", "Content-Length: 1", ""],
        expected: "HTTP/1.1 200 OK\r\nX-A: 1\r\nContent-Length: 1\r\n" + via + "\r\n"),
    HeadCase(
        "only a 1xx before the end: 502",
        ["HTTP/1.1 100 Continue", ""],
        expected: "HTTP/1.1 502 Bad Gateway\r\nTransfer-Encoding: chunked\r\n" + via + "\r\n", chunked: true),
    HeadCase(
        "trailers after the head are not part of it",
        ["HTTP/1.1 200 OK", "Transfer-Encoding: chunked", "", "X-Trailer: 1", ""],
        expected: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n" + via + "\r\n", chunked: true),
]

@Suite struct ResponseHeadAssemblerTests {
    @Test(arguments: headCases)
    func matchesTheExpectedHead(_ c: HeadCase) {
        var a = ResponseHeadAssembler()
        let got = assemble(c.lines, options: c.options, answersChallenges: c.answersChallenges, assembler: &a)
        #expect(got.head == c.expected)
        #expect(got.framing == c.framing)
    }

    @Test(arguments: headCases)
    func matchesTheStringPath(_ c: HeadCase) {
        var a = ResponseHeadAssembler()
        let got = assemble(c.lines, options: c.options, answersChallenges: c.answersChallenges, assembler: &a)
        let old = viaStringPath(c.lines, options: c.options, answersChallenges: c.answersChallenges)
        #expect(got.head == old.head)
        #expect(got.framing == old.framing)
    }

    /// One assembler for every case in turn, as a connection reuses it across exchanges.
    /// .NET attempts NTLM/Negotiate to an http:// origin through a proxy only when the relayed 401 carries
    /// `Proxy-Support: Session-Based-Authentication`; other answers are written as before.
    @Test(arguments: [
        (401, ["NTLM"], true),
        (401, ["Negotiate"], true),
        (401, ["negotiate oYGzMIGw"], true),
        (401, ["Kerberos"], true),
        (401, ["Basic realm=\"r\", NTLM"], true),
        (401, ["Basic realm=\"NTLM, Negotiate\""], false),
        (401, ["Basic realm=\"r\""], false),
        (401, ["Bearer"], false),
        (401, [], false),
        (407, ["NTLM"], false),
        (200, ["Negotiate oYGzMIGw"], false),
    ])
    func sessionBasedAuthenticationIsAnnouncedForWindowsLogins(_ status: Int, _ challenges: [String], _ expected: Bool)
    {
        #expect(ProxySupport.applies(status: status, wwwAuthenticate: challenges) == expected)
        let lines = ["HTTP/1.1 \(status) X"] + challenges.map { "WWW-Authenticate: \($0)" } + ["Content-Length: 0", ""]
        var a = ResponseHeadAssembler()
        let head = assemble(lines, options: headCases[0].options, answersChallenges: false, assembler: &a).head
        #expect(
            head.contains("\r\nProxy-Support: Session-Based-Authentication\r\nConnection: Proxy-Support\r\n")
                == expected)
        #expect(head.contains("Proxy-Support") == expected)
    }

    @Test func resetReusesTheAssembler() {
        var a = ResponseHeadAssembler(capacity: 64)
        for c in headCases + headCases.reversed() {
            a.reset()
            let got = assemble(c.lines, options: c.options, answersChallenges: c.answersChallenges, assembler: &a)
            #expect(got.head == c.expected, "\(c.name)")
        }
    }

    /// The status is the one libcurl frames the body by (a fuzzing finding: `HTTP/1.1  204` reached the client as a
    /// 502 with `Content-Length: 5` and no body, so the next response on its connection was read as that body).
    @Test(arguments: [
        ("HTTP/1.1  204 No Content", 204, "HTTP/1.1 204 No Content\r\n"),
        ("HTTP/1.1 \t304 Not Modified", 304, "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n"),
        ("HTTP/1.1 204\tNo", 204, "HTTP/1.1 204 No\r\n"),
        ("HTTP/1.1 204OK", 204, "HTTP/1.1 204 OK\r\n"),
        ("HTTP/1.1 200", 200, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"),
        ("HTTP/2 200 OK", 200, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"),
        // libcurl refuses these ("Unsupported response code"); were one to arrive, it is a 502.
        ("HTTP/1.1 2040 No Content", 502, "HTTP/1.1 502 No Content\r\nContent-Length: 5\r\n"),
        ("HTTP/1.1 099 Low", 502, "HTTP/1.1 502 Low\r\nContent-Length: 5\r\n"),
        ("HTTP/1.1 +20 X", 502, "HTTP/1.1 502 X\r\nContent-Length: 5\r\n"),
    ])
    func statusAsLibcurlReadsIt(_ statusLine: String, _ status: Int, _ expectedStart: String) {
        var a = ResponseHeadAssembler()
        let got = assemble(
            [statusLine + "\r\n", "Content-Length: 5\r\n", "\r\n"], options: makeOptions(), assembler: &a)
        #expect(a.status == status, "\(statusLine)")
        #expect(got.head == expectedStart + via + "\r\n", "\(statusLine)")
        #expect(got.framing.noBody == (status == 204 || status == 304), "\(statusLine)")
    }

    /// A bare CR in the reason phrase is refused like one in a value (the corpus case: `200 O\rContent-Length: 99`).
    @Test func bareCRInTheReasonPhraseIsAViolation() {
        var a = ResponseHeadAssembler()
        _ = Array("HTTP/1.1 200 O\rContent-Length: 99\r\n".utf8).withUnsafeBytes { a.add(line: $0) }
        #expect(a.violation == .invalidReasonPhrase)
        var b = ResponseHeadAssembler()
        _ = Array("HTTP/1.1 200 Fine\tand dandy\r\n".utf8).withUnsafeBytes { b.add(line: $0) }
        #expect(b.violation == nil)
    }

    /// A substituted 502 does not carry the length of the head it replaces: that body never comes (an e2e corpus
    /// finding, with `HTTP/1.1 100 Continue` + `Content-Length: 5`, or a head cut after `Content-Length: 100`).
    @Test func substitutedStatusDropsTheUpstreamLength() {
        for lines in [
            ["HTTP/1.1 100 Continue", "Content-Length: 5", ""], ["HTTP/1.1 200 OK", "Content-Length: 100"],
            ["HTTP/1.1 101 Switching Protocols", "Upgrade: x", "Content-Length: 9", ""],
        ] {
            var a = ResponseHeadAssembler()
            for l in lines { _ = Array((l + "\r\n").utf8).withUnsafeBytes { a.add(line: $0) } }
            a.substituteStatus(502)
            var out = ByteBuffer()
            let framing = a.write(into: &out, options: makeOptions())
            #expect(framing.contentLength == nil && framing.chunked, "\(lines)")
            #expect(String(decoding: out.unreadBytes, as: UTF8.self).hasPrefix("HTTP/1.1 502 Bad Gateway\r\n"))
            #expect(a.contentLength == nil)
        }
    }

    /// A line that looks like a status line inside a head is a field to libcurl (it has a colon), not a new head.
    @Test func statusLineOnlyAtTheStartOfAHead() {
        var a = ResponseHeadAssembler()
        let got = assemble(
            ["HTTP/1.1 204 No Content\r\n", "HTTP/1.1 200 OK: x\r\n", "Content-Length: 5\r\n", "\r\n"],
            options: makeOptions(), assembler: &a)
        #expect(a.status == 204)
        #expect(got.framing.noBody)
        var b = ResponseHeadAssembler()
        func add(_ s: String) -> ResponseHeadAssembler.Line { Array(s.utf8).withUnsafeBytes { b.add(line: $0) } }
        #expect(add("HTTP/1.1 100 Continue\r\n") == .status(100))
        #expect(add("HTTP/1.1 200 OK: x\r\n") == .field)
        #expect(add("\r\n") == .end)
        #expect(add("HTTP/1.1 200 OK\r\n") == .status(200))
    }

    @Test func lineKinds() {
        var a = ResponseHeadAssembler()
        func add(_ s: String) -> ResponseHeadAssembler.Line { Array(s.utf8).withUnsafeBytes { a.add(line: $0) } }
        #expect(add(" orphan fold\r\n") == .ignored)
        #expect(add("HTTP/1.1 100 Continue\r\n") == .status(100))
        #expect(add("\r\n") == .end)
        #expect(a.isComplete && !a.isFinal(answersChallenges: false))
        #expect(add("X-After: 1\r\n") == .ignored)
        #expect(add("HTTP/1.1 401 Unauthorized\r\n") == .status(401))
        #expect(!a.isComplete)
        #expect(add("Content-Length: 3\r\n") == .field)
        #expect(add("  more\r\n") == .field)
        #expect(add("garbage\r\n") == .ignored)
        #expect(add("\r\n") == .end)
        #expect(a.isFinal(answersChallenges: false) && !a.isFinal(answersChallenges: true))
        #expect(add("HTTP/1.1 407 Proxy Authentication Required\r\n") == .status(407))
        #expect(add("\r\n") == .end)
        #expect(!a.isFinal(answersChallenges: true))
        #expect(add("HTTP/1.1 200 OK\r\n") == .status(200))
        #expect(add("\r\n") == .end)
        #expect(a.isFinal(answersChallenges: true))
        #expect(add("X-Trailer: 1\r\n") == .ignored)
        #expect(add("\r\n") == .ignored)
    }

    @Test func lookUps() {
        var a = ResponseHeadAssembler()
        for line in [
            "HTTP/1.1 200 OK", "Content-Type:  application/json; charset=utf-8 ", "CONTENT-ENCODING: gzip",
            "Content-Length: 12", "content-length: 12", "Connection: close", "",
        ] {
            _ = Array((line + "\r\n").utf8).withUnsafeBytes { a.add(line: $0) }
        }
        #expect(a.status == 200)
        #expect(a.string(of: "content-type") == "application/json; charset=utf-8")
        #expect(a.value(of: "content-encoding").map { Array($0) } == Array("gzip".utf8))
        #expect(a.string(of: "connection") == "close")  // hop-by-hop fields can be looked up
        #expect(a.value(of: "transfer-encoding") == nil)
        #expect(a.contentLength == 12)
    }

    @Test(
        arguments: [
            (["Content-Length: 12"], Int64(12)),
            ([], nil),
            (["Content-Length: 12", "Transfer-Encoding: chunked"], nil),
            (["Content-Length: 12", "Content-Length: 13"], nil),
            (["Content-Length: 12", "Content-Length: 12"], Int64(12)),
            (["Content-Length: x"], nil),
            (["Content-Length: "], nil),
            (["Content-Length: -0"], nil),
            (["Content-Length: +5"], nil),
            (["Content-Length: 5, 5"], Int64(5)),
            (["Content-Length: 5,5", "Content-Length: 5"], Int64(5)),
            (["Content-Length: 5, 7"], nil),
            // Digits compare as numbers (the String path compared text: "05" differed from "5").
            (["Content-Length: 5", "Content-Length: 05"], Int64(5)),
            (["Content-Length: 99999999999999999999"], nil),
            (["Content-Length: 9223372036854775807"], Int64.max),
            (["Connection: Content-Length", "Content-Length: 5"], nil),
        ] as [([String], Int64?)])
    func contentLength(_ fields: [String], _ expected: Int64?) {
        var a = ResponseHeadAssembler()
        for line in ["HTTP/1.1 200 OK"] + fields + [""] {
            _ = Array((line + "\r\n").utf8).withUnsafeBytes { a.add(line: $0) }
        }
        #expect(a.contentLength == expected)
    }

    /// Heads a lenient client could read differently from libcurl are flagged (the connection answers 502 instead
    /// of relaying them); the first reason found is kept.
    @Test(
        arguments: [
            (["Content-Length : 99", "Content-Length: 5"], .whitespaceBeforeColon),
            (["X-A\t: 1"], .whitespaceBeforeColon),
            (["X A: 1"], .invalidFieldName),
            ([": empty name"], .invalidFieldName),
            (["X-(A): 1"], .invalidFieldName),
            (["X-A: a\rContent-Length: 99", "Content-Length: 5"], .invalidFieldValue),
            (["X-A: a\u{0}b"], .invalidFieldValue),
            (["X-A: a", " folded\rmore"], .invalidFieldValue),
            (["Content-Length: 5", "Content-Length: 7"], .conflictingContentLength),
            (["Content-Length: 5, 7"], .conflictingContentLength),
            (["Content-Length: 5", "Content-Length: 5, 6"], .conflictingContentLength),
            (["Content-Length: x"], .invalidContentLength),
            (["Content-Length: +5"], .invalidContentLength),
            (["Content-Length: -1"], .invalidContentLength),
            (["Content-Length: "], .invalidContentLength),
            (["Content-Length: 99999999999999999999"], .invalidContentLength),
            (["Content-Length: 5", "Transfer-Encoding: chunked", "Content-Length: 6"], .conflictingContentLength),
        ] as [([String], ResponseHeadAssembler.Violation)])
    func invalidHeadsAreFlagged(_ fields: [String], _ expected: ResponseHeadAssembler.Violation) {
        var a = ResponseHeadAssembler()
        for line in ["HTTP/1.1 200 OK"] + fields + [""] {
            _ = Array((line + "\r\n").utf8).withUnsafeBytes { a.add(line: $0) }
        }
        #expect(a.violation == expected)
    }

    @Test(
        arguments: [
            ["Content-Length: 5", "Content-Length: 5"],
            ["Content-Length: 5, 5"],
            ["X-Odd: \u{1}tolerated control", "Content-Length: 0"],
            ["X-Tab:\tvalue\twith tabs"],
            ["Content-Type: text/plain", " folded", "Content-Length: 3"],
            ["no colon here", "Content-Length: 1"],
        ])
    func validHeadsAreNotFlagged(_ fields: [String]) {
        var a = ResponseHeadAssembler()
        for line in ["HTTP/1.1 200 OK"] + fields + [""] {
            _ = Array((line + "\r\n").utf8).withUnsafeBytes { a.add(line: $0) }
        }
        #expect(a.violation == nil)
    }

    /// A flag belongs to one head: an interim head's does not outlive it, and neither survives a reset.
    @Test func aViolationEndsWithItsHead() {
        var a = ResponseHeadAssembler()
        func add(_ s: String) { _ = Array((s + "\r\n").utf8).withUnsafeBytes { a.add(line: $0) } }
        add("HTTP/1.1 100 Continue")
        add("X A: 1")
        add("")
        #expect(a.violation == .invalidFieldName)
        add("HTTP/1.1 200 OK")
        add("Content-Length: 3")
        add("")
        #expect(a.violation == nil)
        add("HTTP/1.1 200 OK")
        add("Content-Length: 3")
        add("Content-Length: 4")
        #expect(a.violation == .conflictingContentLength)
        a.reset()
        #expect(a.violation == nil)
        add("HTTP/1.1 200 OK")
        add("Content-Length: 4")
        add("")
        #expect(a.violation == nil)
        #expect(a.contentLength == 4)
    }

    /// The one deliberate difference: bytes that are not UTF-8 are relayed as they came (the String path replaced
    /// them with U+FFFD, EF BF BD).
    @Test func bytesThatAreNotUTF8PassThrough() {
        var a = ResponseHeadAssembler()
        let lines: [[UInt8]] = [
            Array("HTTP/1.1 200 ".utf8) + [0xC4, 0x72, 0x67, 0x65, 0x72] + [13, 10],
            Array("Content-Disposition: attachment; filename=\"".utf8) + [0xE9, 0x2E, 0x74, 0x78, 0x74, 0x22] + [
                13, 10,
            ],
            Array("Content-Length: 0\r\n".utf8),
            [13, 10],
        ]
        for l in lines { _ = l.withUnsafeBytes { a.add(line: $0) } }
        var out = ByteBuffer()
        _ = a.write(into: &out, options: makeOptions())
        let expected: [UInt8] =
            Array("HTTP/1.1 200 ".utf8) + [0xC4, 0x72, 0x67, 0x65, 0x72] + Array("\r\n".utf8)
            + Array("Content-Disposition: attachment; filename=\"".utf8) + [0xE9, 0x2E, 0x74, 0x78, 0x74, 0x22]
            + Array("\r\nContent-Length: 0\r\nVia: 1.1 authproxy\r\n\r\n".utf8)
        #expect(out.unreadBytes == expected)
    }

    @Test func writesAfterWhatIsAlreadyInTheBuffer() {
        var a = ResponseHeadAssembler()
        for line in ["HTTP/1.1 200 OK", "Content-Length: 1", ""] {
            _ = Array((line + "\r\n").utf8).withUnsafeBytes { a.add(line: $0) }
        }
        var out = ByteBuffer(Array("previous".utf8))
        _ = a.write(into: &out, options: makeOptions())
        #expect(
            String(decoding: out.unreadBytes, as: UTF8.self)
                == "previousHTTP/1.1 200 OK\r\nContent-Length: 1\r\nVia: 1.1 authproxy\r\n\r\n")
    }

    @Test(
        arguments: [
            ("0", Int64(0)), ("+5", 5), ("-5", -5), ("", nil), ("+", nil), ("1 ", nil), ("0x10", nil),
            ("9223372036854775807", Int64.max), ("9223372036854775808", nil), ("-9223372036854775808", Int64.min),
        ]
            as [(String, Int64?)])
    func integersAreReadAsSwiftReadsThem(_ text: String, _ expected: Int64?) {
        let got = Array(text.utf8).withUnsafeBytes { ResponseHeadAssembler.parseInteger($0) }
        #expect(got == expected)
        #expect(got == Int64(text))
    }
}

@Suite struct ResponseHeadLocationRewriteTests {
    @Test func onlyLocationFieldsAreRewrittenAndTheHeadStaysWellFormed() {
        var a = ResponseHeadAssembler()
        let lines = [
            "HTTP/1.1 301 Moved\r\n", "Location: https://h/a?f=json&token=T\r\n", "X-Other: token=T\r\n",
            "content-location: /a?token=T\r\n", "Refresh: 0; url=/a?token=T\r\n", "Content-Length: 0\r\n", "\r\n",
        ]
        for l in lines { _ = Array(l.utf8).withUnsafeBytes { a.add(line: $0) } }
        a.rewriteLocations { v in
            Array(v).withUnsafeBytes { RedirectTokenScrub.scrub($0, token: "T") }
        }
        var out = ByteBuffer()
        _ = a.write(
            into: &out,
            options: .init(
                isHeadRequest: false, clientMinorVersion: 1, keepAlive: true,
                corsOrigin: nil, via: "1.1 authproxy"))
        let head = String(decoding: out.unreadBytes, as: UTF8.self)
        #expect(head.contains("Location: https://h/a?f=json\r\n"))
        #expect(head.contains("content-location: /a\r\n"))
        #expect(head.contains("Refresh: 0; url=/a\r\n"))
        #expect(head.contains("X-Other: token=T\r\n"))
        #expect(head.hasSuffix("\r\n\r\n"))
        // The next head has no location field: nothing is looked at.
        a.reset()
        for l in ["HTTP/1.1 200 OK\r\n", "Content-Length: 0\r\n", "\r\n"] {
            _ = Array(l.utf8).withUnsafeBytes { a.add(line: $0) }
        }
        var called = false
        a.rewriteLocations { _ in
            called = true
            return nil
        }
        #expect(!called)
    }
}

@Suite struct ResponseHeadCORSTests {
    private func head(cors: String?, vary: Bool) -> String {
        var a = ResponseHeadAssembler()
        for l in [
            "HTTP/1.1 200 OK\r\n", "Access-Control-Allow-Origin: *\r\n", "Vary: Accept-Encoding\r\n",
            "Content-Length: 0\r\n", "\r\n",
        ] {
            _ = Array(l.utf8).withUnsafeBytes { a.add(line: $0) }
        }
        var out = ByteBuffer()
        _ = a.write(
            into: &out,
            options: .init(
                isHeadRequest: false, clientMinorVersion: 1, keepAlive: true,
                corsOrigin: cors, varyOrigin: vary, via: "1.1 authproxy"))
        return String(decoding: out.unreadBytes, as: UTF8.self)
    }

    /// A `/proxy` answer to a request without `Origin` (an `<img>`) still says `Vary: Origin`, so a browser does
    /// not reuse it for a CORS request; it keeps the upstream's fields as they are.
    @Test func aProxyEndpointAnswerVariesByOriginWithoutOne() {
        let h = head(cors: nil, vary: true)
        #expect(h.contains("Vary: Origin\r\n"))
        #expect(h.contains("Access-Control-Allow-Origin: *\r\n"))
        #expect(h.contains("Vary: Accept-Encoding\r\n"))
    }

    @Test func anAllowedOriginIsAnsweredOnceWithVary() {
        let h = head(cors: "https://maps.example.test", vary: true)
        #expect(h.contains("Access-Control-Allow-Origin: https://maps.example.test\r\nVary: Origin\r\n"))
        #expect(!h.contains("Access-Control-Allow-Origin: *"))
        #expect(h.components(separatedBy: "Vary: Origin").count == 2)
    }

    @Test func otherExchangesAreUntouched() {
        #expect(!head(cors: nil, vary: false).contains("Vary: Origin"))
    }
}
