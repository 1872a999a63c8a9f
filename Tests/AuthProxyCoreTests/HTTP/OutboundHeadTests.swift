import Testing

@testable import AuthProxyCore

/// No head the proxy writes upstream holds a byte its own request parser would refuse (issue 35, item 1).
@Suite struct OutboundHeadTests {
    private func problem(_ fields: [(String, String)], method: String = "GET", target: String = "/arcgis/rest?f=json")
        -> OutboundHead.Problem?
    {
        OutboundHead.problem(method: method, target: target, fields: HTTPHeaders(fields))
    }

    @Test func anOrdinaryHeadPasses() {
        #expect(
            problem([
                ("Host", "gis.example.com"), ("Authorization", "Bearer eyJ.a-b_c~+/=="), ("User-Agent", "GDAL\t3.6"),
                ("X-Esri-Authorization", "Bearer AAPK1"), ("Referer", "app://authproxy"), ("X-Name", "Zürich"),
            ]) == nil)
    }

    @Test func aSmuggledRequestInATokenIsRefusedNamingTheFieldNotTheValue() {
        let p = problem([
            ("Host", "gis"), ("Authorization", "Bearer tok\r\nX-Injected: 1\r\n\r\nGET /smuggled HTTP/1.1"),
        ])
        #expect(p?.field == "Authorization")
        #expect(p?.message.contains("0x0D") == true)
        #expect(p?.message.contains("smuggled") == false)
        #expect(p?.message.contains("tok") == false)
    }

    @Test(arguments: [UInt8(0), 1, 0x0A, 0x0D, 0x1F, 0x7F])
    func everyControlByteButTabIsRefused(_ b: UInt8) {
        let value = "Bearer a" + String(decoding: [b], as: UTF8.self) + "b"
        #expect(problem([("X-Esri-Authorization", value)])?.field == "X-Esri-Authorization")
    }

    @Test func everyPositionOfALongValueIsChecked() {
        // The value check reads eight bytes at a time: a bad byte in any lane, and good bytes of every class.
        let good: [UInt8] = Array("Bearer eyJ.ab-_~+/=".utf8) + [9, 0x20, 0x7E, 0x80, 0xC3, 0xA9, 0xFF]
        for bad: UInt8 in [0, 1, 0x0A, 0x0D, 0x1F, 0x7F] {
            for at in 0..<40 {
                var bytes = (0..<41).map { good[$0 % good.count] }
                bytes[0] = UInt8(ascii: "v")
                bytes[40] = UInt8(ascii: "v")
                bytes[at == 0 ? 1 : at] = bad
                let value = String(decoding: bytes, as: UTF8.self)
                #expect(OutboundHead.fieldProblem(name: "X", value: value) != nil, "0x\(bad) at \(at)")
                #expect(problem([("X", value)]) != nil, "0x\(bad) at \(at)")
            }
        }
        let clean = String(
            decoding: (0..<41).map { i in i == 0 || i == 40 ? UInt8(ascii: "v") : good[i % good.count] }, as: UTF8.self)
        #expect(problem([("X", clean)]) == nil)
    }

    @Test func whitespaceTheParserWouldTrimIsRefused() {
        #expect(problem([("X-Key", " k")]) != nil)
        #expect(problem([("X-Key", "k\t")]) != nil)
        #expect(problem([("X-Key", "a b")]) == nil)
    }

    @Test func namesMustBeTokensAndAreNotShownWhenTheyAreNot() {
        let p = problem([("X-A\r\nEvil", "1")])
        #expect(p?.field == "(an invalid name)")
        #expect(problem([("", "1")]) != nil)
    }

    @Test func theRequestLineIsCheckedToo() {
        #expect(problem([], target: "/a b")?.field == nil)
        #expect(problem([], target: "/a#frag") != nil)
        #expect(problem([], target: "/a\u{7F}") != nil)
        #expect(problem([], target: "/caf\u{E9}") != nil)
        #expect(problem([], method: "GE T") != nil)
        #expect(problem([], method: "") != nil)
        #expect(problem([], target: "http://h:8080/p?q=%0D%0A") == nil)
    }

    @Test func whatPassesParsesBackToTheSameHead() throws {
        let fields: [(String, String)] = [
            ("Host", "gis"), ("Authorization", "Bearer x.y.z"), ("X-Obs", "caf\u{E9}"), ("X-Tab", "a\tb"),
        ]
        #expect(problem(fields) == nil)
        var text = "GET /arcgis/rest/services?f=json HTTP/1.1\r\n"
        for (n, v) in fields { text += "\(n): \(v)\r\n" }
        text += "\r\n"
        var parser = RequestHeadParser()
        let bytes = Array(text.utf8)
        guard case .complete(let head, _) = bytes.withUnsafeBytes({ parser.parse($0) }) else {
            Issue.record("did not parse")
            return
        }
        #expect(head.headers == HTTPHeaders(fields))
    }
}
