import Testing

@testable import AuthProxyCore

/// Feeds `body` in pieces of the given sizes (the rest in one) and returns what the client would get.
private func scrubbed(_ body: String, secrets: [String], pieces: [Int] = []) -> String {
    var s = ResponseScrubber(secrets: secrets)!
    var out: [UInt8] = []
    let bytes = Array(body.utf8)
    var at = 0
    for n in pieces where at < bytes.count {
        let end = min(bytes.count, at + n)
        bytes[at..<end].withUnsafeBytes { s.feed($0) { out.append(contentsOf: $0) } }
        #expect(s.heldCount <= s.holdBack)
        at = end
    }
    if at < bytes.count { bytes[at...].withUnsafeBytes { s.feed($0) { out.append(contentsOf: $0) } } }
    s.finish { out.append(contentsOf: $0) }
    return String(decoding: out, as: UTF8.self)
}

@Suite struct ResponseScrubberTests {
    let key = "2f0c4a7e-9b1d-4e36-a2c5-7d8e9f0a1b2c"

    @Test func everyEncodingIsMaskedAndTheLengthStays() {
        let body = """
            <OnlineResource xlink:href="http://gs/wms?authkey=\(key)&amp;SERVICE=WMS"/>
            {"next": "http:\\/\\/gs\\/wfs?authkey=2f0c4a7e\\u002d9b1d-4e36-a2c5-7d8e9f0a1b2c"}
            ReturnUrl=%3Fauthkey%3D2f0c4a7e%2D9b1d%2D4e36%2Da2c5%2D7d8e9f0a1b2c
            twice: 2f0c4a7e%252D9b1d-4e36-a2c5-7d8e9f0a1b2c and &#50;f0c4a7e&#x2D;9b1d-4e36-a2c5-7d8e9f0a1b2c
            """
        let out = scrubbed(body, secrets: [key])
        #expect(out.utf8.count == body.utf8.count)
        #expect(!out.contains("9b1d"))
        #expect(!out.contains("1b2c"))
        #expect(out.contains("authkey=" + String(repeating: "*", count: key.utf8.count) + "&amp;SERVICE=WMS"))
        #expect(out.contains("http:\\/\\/gs\\/wfs?authkey=***"))
    }

    @Test func jsonAndXMLEscapesOfPunctuationAreMasked() {
        let secret = "a/b&c\"d"
        let body = #"{"k":"a\/b&c\"d"} <k v="a/b&amp;c&quot;d"/> a\u002Fb\u0026c\u0022d"#
        let out = scrubbed(body, secrets: [secret])
        #expect(out == #"{"k":"*********"} <k v="****************"/> **********************"#)
    }

    @Test func aSecretSplitAtEveryByteIsStillCaught() {
        let page = { (k: String) in
            "<a href=\"http://gs/ows?authkey=\(k)&amp;request=GetMap\">x</a>" + String(repeating: "y", count: 50)
        }
        let body = page(key)
        let expected = page(String(repeating: "*", count: key.utf8.count))
        for cut in 1..<body.utf8.count {
            #expect(scrubbed(body, secrets: [key], pieces: [cut]) == expected)
        }
        // One byte at a time, and an encoded form split inside its escapes.
        #expect(scrubbed(body, secrets: [key], pieces: Array(repeating: 1, count: body.utf8.count)) == expected)
        let encoded = "x=2f0c4a7e%2D9b1d%2D4e36%2Da2c5%2D7d8e9f0a1b2c;"
        for cut in 1..<encoded.utf8.count {
            #expect(scrubbed(encoded, secrets: [key], pieces: [cut]) == "x=" + String(repeating: "*", count: 44) + ";")
        }
    }

    @Test func severalSecretsAreAllMasked() {
        let out = scrubbed("key=AAA1&token=BBB2&other=AAA", secrets: ["AAA1", "BBB2", "AAA1"], pieces: [5, 3])
        #expect(out == "key=****&token=****&other=AAA")
    }

    @Test func memoryStaysBoundedWhateverTheBodySize() {
        var s = ResponseScrubber(secrets: [key])!
        #expect(s.holdBack == key.utf8.count * EncodedTokenFinder.maxEncodedCharacterBytes - 1)
        let chunk = Array(String(repeating: "<Layer><Name>topp:states</Name></Layer>\n", count: 400).utf8)
        var total = 0
        for _ in 0..<50 {
            chunk.withUnsafeBytes { s.feed($0) { total += $0.count } }
            #expect(s.heldCount <= s.holdBack)
        }
        s.finish { total += $0.count }
        #expect(total == chunk.count * 50)
    }

    @Test func nothingToMaskWithoutASecret() {
        #expect(ResponseScrubber(secrets: []) == nil)
        #expect(ResponseScrubber(secrets: [""]) == nil)
        #expect(
            scrubbed("no key in here, just 2f0c4a7e", secrets: [key], pieces: [3, 7]) == "no key in here, just 2f0c4a7e"
        )
    }
}
