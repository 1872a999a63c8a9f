import Testing

@testable import AuthProxyCore

private func parse(_ text: String) -> RequestHeadParser.Result {
    var p = RequestHeadParser()
    let bytes = Array(text.utf8)
    return bytes.withUnsafeBytes { p.parse($0) }
}

private func head(_ text: String) -> RequestHead? {
    if case .complete(let h, _) = parse(text) { return h }
    return nil
}

private func status(_ text: String) -> Int? {
    if case .failed(let e) = parse(text) { return e.status }
    return nil
}

@Suite struct RequestHeadParserTests {
    @Test func absoluteForm() throws {
        let h = try #require(
            head("GET http://Example.com:8080/arcgis/rest?f=json HTTP/1.1\r\nHost: example.com\r\n\r\n"))
        #expect(h.method == "GET")
        #expect(
            h.target
                == .absolute(
                    URLTarget(scheme: "http", host: "example.com", port: 8080, pathAndQuery: "/arcgis/rest?f=json")))
        #expect(h.keepAlive)
        #expect(h.framing == .none)
    }

    @Test func fragmentsAndPercentHostsAreRefused() {
        for text in [
            "GET /a#b HTTP/1.1\r\nHost: x\r\n\r\n", "GET /x#/../../secure HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET http://h/a#b HTTP/1.1\r\n\r\n", "GET http://127%2e0%2e0%2e1/ HTTP/1.1\r\n\r\n",
            "CONNECT h%6fst:443 HTTP/1.1\r\n\r\n",
        ] {
            #expect(status(text) == 400, "\(text)")
        }
    }

    @Test func absoluteFormDefaults() throws {
        let h = try #require(head("GET https://h?x=1 HTTP/1.1\r\n\r\n"))
        #expect(h.target == .absolute(URLTarget(scheme: "https", host: "h", port: 443, pathAndQuery: "/?x=1")))
        let v6 = try #require(head("GET http://[::1]:81/ HTTP/1.1\r\n\r\n"))
        guard case .absolute(let u) = v6.target else { Issue.record("not absolute"); return }
        #expect(u.host == "::1")
        #expect(u.url == "http://[::1]:81/")
    }

    @Test func authorityAndOriginForms() throws {
        #expect(
            head("CONNECT h.example:443 HTTP/1.1\r\nHost: h.example:443\r\n\r\n")?.target
                == .authority(host: "h.example", port: 443))
        #expect(head("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")?.target == .origin(path: "/healthz"))
        #expect(status("CONNECT h.example HTTP/1.1\r\n\r\n") == 400)
    }

    @Test func consumedStopsAtHeadEnd() {
        let text = "POST http://h/ HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET"
        guard case .complete(_, let consumed) = parse(text) else { Issue.record("incomplete"); return }
        #expect(consumed == text.utf8.count - 6)
    }

    @Test func needsMoreUntilEmptyLine() {
        #expect(parse("GET http://h/ HTTP/1.1\r\nHost: h\r\n") == .needMore)
        #expect(parse("GET http://h/ HTT") == .needMore)
    }

    @Test func leadingEmptyLinesAreIgnored() {
        #expect(head("\r\n\r\nGET http://h/ HTTP/1.1\r\n\r\n") != nil)
    }

    @Test func framing() {
        #expect(head("POST http://h/ HTTP/1.1\r\nContent-Length: 10\r\n\r\n")?.framing == .contentLength(10))
        #expect(
            head("POST http://h/ HTTP/1.1\r\nContent-Length: 10\r\nContent-Length: 10\r\n\r\n")?.framing
                == .contentLength(10))
        #expect(head("POST http://h/ HTTP/1.1\r\nContent-Length: 7, 7\r\n\r\n")?.framing == .contentLength(7))
        #expect(head("POST http://h/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")?.framing == .chunked)
        #expect(head("POST http://h/ HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n")?.framing == .chunked)
    }

    /// Each malformed or ambiguous request and the status it must get.
    @Test(arguments: [
        (
            "smuggling: CL + TE", "POST http://h/ HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            400
        ),
        ("smuggling: differing CL", "POST http://h/ HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 400),
        ("smuggling: CL list differs", "POST http://h/ HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\n", 400),
        ("CL not a number", "POST http://h/ HTTP/1.1\r\nContent-Length: +5\r\n\r\n", 400),
        ("CL negative", "POST http://h/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
        ("CL huge", "POST http://h/ HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", 400),
        ("TE gzip", "POST http://h/ HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
        ("TE gzip, chunked", "POST http://h/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
        ("TE chunked, gzip", "POST http://h/ HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 501),
        (
            "TE chunked twice",
            "POST http://h/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501
        ),
        ("TE identity", "POST http://h/ HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n", 501),
        ("TE in HTTP/1.0", "POST http://h/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        ("obs-fold", "GET http://h/ HTTP/1.1\r\nX-A: 1\r\n  continued\r\n\r\n", 400),
        ("bare CR in value", "GET http://h/ HTTP/1.1\r\nX-A: a\rb\r\n\r\n", 400),
        ("bare LF", "GET http://h/ HTTP/1.1\nHost: h\r\n\r\n", 400),
        ("space before colon", "GET http://h/ HTTP/1.1\r\nHost : h\r\n\r\n", 400),
        ("invalid name char", "GET http://h/ HTTP/1.1\r\nX(A): 1\r\n\r\n", 400),
        ("empty name", "GET http://h/ HTTP/1.1\r\n: 1\r\n\r\n", 400),
        ("no colon", "GET http://h/ HTTP/1.1\r\nNoColon\r\n\r\n", 400),
        ("NUL in value", "GET http://h/ HTTP/1.1\r\nX-A: a\u{0}b\r\n\r\n", 400),
        ("invalid method", "G@T http://h/ HTTP/1.1\r\n\r\n", 400),
        ("two spaces", "GET  http://h/ HTTP/1.1\r\n\r\n", 400),
        ("missing version", "GET http://h/\r\n\r\n", 400),
        ("bad version", "GET http://h/ HTTP/2.0\r\n\r\n", 505),
        ("garbage version", "GET http://h/ HTTX/1.1\r\n\r\n", 400),
        ("unsupported scheme", "GET ftp://h/ HTTP/1.1\r\n\r\n", 400),
        ("user info", "GET http://user:pw@h/ HTTP/1.1\r\n\r\n", 400),
        ("empty host", "GET http:///x HTTP/1.1\r\n\r\n", 400),
        ("bad port", "GET http://h:99999/ HTTP/1.1\r\n\r\n", 400),
        ("two Host", "GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        ("origin-form without Host", "GET /x HTTP/1.1\r\n\r\n", 400),
        ("non-ASCII target", "GET http://h/\u{e9} HTTP/1.1\r\n\r\n", 400),
        ("Expect other", "POST http://h/ HTTP/1.1\r\nExpect: foo\r\nContent-Length: 1\r\n\r\n", 417),
        ("CONNECT with body", "CONNECT h:443 HTTP/1.1\r\nContent-Length: 4\r\n\r\n", 400),
    ])
    func rejects(_ name: String, _ text: String, _ expected: Int) {
        #expect(status(text) == expected, "\(name)")
    }

    @Test func requestLineLimit() {
        let long = "GET http://h/" + String(repeating: "a", count: 8200) + " HTTP/1.1\r\n\r\n"
        #expect(status(long) == 414)
        // Without a line end yet, too: no need to wait for the rest.
        #expect(status("GET http://h/" + String(repeating: "a", count: 8300)) == 414)
    }

    /// A request line of exactly 8 KiB is accepted however its bytes arrive: a read that ends with its CR (the LF
    /// still to come) used to count the CR and answer 414.
    @Test func requestLineLimitDoesNotDependOnReads() {
        let line = "GET http://h/" + String(repeating: "a", count: RequestHeadParser.maxRequestLine - 22) + " HTTP/1.1"
        #expect(line.utf8.count == RequestHeadParser.maxRequestLine)
        let bytes = Array((line + "\r\nHost: h\r\n\r\n").utf8)
        var p = RequestHeadParser()
        let first = bytes.withUnsafeBytes { p.parse(UnsafeRawBufferPointer(rebasing: $0[..<(line.utf8.count + 1)])) }
        #expect(first == .needMore)
        guard case .complete = bytes.withUnsafeBytes({ p.parse($0) }) else {
            Issue.record("an 8 KiB request line is refused when its CR arrives alone")
            return
        }
        #expect(status(line + "x\r") == 414)
    }

    @Test func headerLimits() {
        var many = "GET http://h/ HTTP/1.1\r\n"
        for i in 0..<101 { many += "X-\(i): v\r\n" }
        #expect(status(many + "\r\n") == 431)
        var exactly100 = "GET http://h/ HTTP/1.1\r\n"
        for i in 0..<100 { exactly100 += "X-\(i): v\r\n" }
        #expect(head(exactly100 + "\r\n") != nil)
        let big = "GET http://h/ HTTP/1.1\r\nX-Big: " + String(repeating: "b", count: 70_000) + "\r\n\r\n"
        #expect(status(big) == 431)
        #expect(status("GET http://h/ HTTP/1.1\r\nX-Big: " + String(repeating: "b", count: 80_000)) == 431)
    }

    @Test func keepAliveSemantics() {
        #expect(head("GET http://h/ HTTP/1.1\r\n\r\n")?.keepAlive == true)
        #expect(head("GET http://h/ HTTP/1.1\r\nConnection: close\r\n\r\n")?.keepAlive == false)
        #expect(head("GET http://h/ HTTP/1.0\r\n\r\n")?.keepAlive == false)
        #expect(head("GET http://h/ HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")?.keepAlive == true)
        #expect(head("GET http://h/ HTTP/1.0\r\nProxy-Connection: keep-alive\r\n\r\n")?.keepAlive == true)
    }

    @Test func expectContinue() {
        #expect(
            head("PUT http://h/ HTTP/1.1\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n")?.expectsContinue == true
        )
        #expect(
            head("PUT http://h/ HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n")?.expectsContinue
                == false)
    }

    @Test func repeatedHeadersKeepOrder() throws {
        let h = try #require(head("GET http://h/ HTTP/1.1\r\nA: 1\r\nB: 2\r\nA: 3\r\n\r\n"))
        #expect(h.headers.values("a") == ["1", "3"])
        #expect(h.headers.fields.map(\.name) == ["A", "B", "A"])
    }
}

@Suite struct HTTPHeadersTests {
    @Test func hopByHopRemoval() {
        let h = HTTPHeaders([
            ("Connection", "X-Private, close"), ("X-Private", "1"), ("Keep-Alive", "timeout=5"), ("TE", "trailers"),
            ("Proxy-Authorization", "Basic x"), ("Upgrade", "h2c"), ("Trailer", "X"), ("Transfer-Encoding", "chunked"),
            ("Proxy-Connection", "keep-alive"), ("Set-Cookie", "a=1"), ("Set-Cookie", "b=2"), ("Accept", "*/*"),
        ])
        let out = h.removingHopByHop()
        #expect(out.fields.map(\.name) == ["Set-Cookie", "Set-Cookie", "Accept"])
        #expect(out.values("set-cookie") == ["a=1", "b=2"])
    }
}

@Suite struct HeaderFoldingTests {
    /// A continuation line belongs to the last field only; earlier fields of the same name stay.
    @Test func continuationExtendsOnlyTheLastField() {
        var h = HTTPHeaders([("Set-Cookie", "a=1"), ("Set-Cookie", "b=2;")])
        h.continueLast(with: "Path=/x")
        #expect(h.values("set-cookie") == ["a=1", "b=2; Path=/x"])
        var empty = HTTPHeaders()
        empty.continueLast(with: "x")
        #expect(empty.count == 0)
    }
}
