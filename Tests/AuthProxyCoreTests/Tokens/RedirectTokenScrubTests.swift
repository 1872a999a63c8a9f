import Testing

@testable import AuthProxyCore

private func scrub(_ value: String, _ token: String = "SECRET-KEY") -> String? {
    Array(value.utf8).withUnsafeBytes { RedirectTokenScrub.scrub($0, token: token) }.map {
        String(decoding: $0, as: UTF8.self)
    }
}

@Suite struct RedirectTokenScrubTests {
    @Test func theInjectedTokenLeavesTheURLAndNothingElseChanges() {
        #expect(
            scrub("https://gis/arcgis/rest/services?f=json&token=SECRET-KEY")
                == "https://gis/arcgis/rest/services?f=json")
        #expect(scrub("https://gis/a?token=SECRET-KEY&f=pjson&where=1%3D1") == "https://gis/a?f=pjson&where=1%3D1")
        #expect(scrub("https://gis/a?token=SECRET-KEY") == "https://gis/a")
        #expect(scrub("/arcgis/rest/services/?f=json&token=SECRET-KEY#top") == "/arcgis/rest/services/?f=json#top")
    }

    @Test func encodedNamesAndValuesAreFound() {
        #expect(scrub("https://gis/a?f=json&Token=SECRET-KEY") == "https://gis/a?f=json")
        #expect(scrub("https://gis/a?f=json&%74oken=SECRET%2DKEY") == "https://gis/a?f=json")
        #expect(scrub("https://gis/a?TOKEN=a%2Bb%2F%3D&x=1", "a+b/=") == "https://gis/a?x=1")
    }

    @Test func otherTokensAndFieldsAreLeftAlone() {
        // Not the injected token (the client's own, or another): the upstream's URL is relayed untouched.
        #expect(scrub("https://gis/a?f=json&token=OTHER") == nil)
        #expect(scrub("https://gis/a?mytoken=SECRET-KEY") == nil)
        #expect(scrub("https://gis/a/SECRET-KEY") == nil)
        #expect(scrub("https://gis/a?f=json") == nil)
        #expect(scrub("https://gis/a?token=SECRET-KEY", "") == nil)
    }

    @Test func aRedirectBodyKeepsItsLengthWithTheTokenMasked() {
        func mask(_ body: String, _ token: String = "SECRET-KEY") -> String? {
            Array(body.utf8).withUnsafeBytes { RedirectTokenScrub.mask($0, token: token) }.map {
                String(decoding: $0, as: UTF8.self)
            }
        }
        #expect(
            mask("<a href=\"https://h/a?token=SECRET-KEY&f=json\">")
                == "<a href=\"https://h/a?token=**********&f=json\">")
        #expect(mask("SECRET-KEYSECRET-KEY") == "********************")
        #expect(mask("a+b/= and a%2Bb%2F%3D", "a+b/=") == "***** and ***********")
        #expect(mask("nothing here") == nil)
        #expect(mask("SECRET") == nil)
    }

    /// The request URL nested in another parameter, escaped for HTML, after `;`, and in fields
    /// other than Location: each kept the key in front of the client (and the next host) before.
    @Test func everyEncodingOfTheTokenIsMaskedInAnyHeaderValue() {
        func clean(_ v: String, url: Bool = true, _ token: String = "SECRET.KEY") -> String? {
            EncodedTokenFinder(token).flatMap { f in
                Array(v.utf8).withUnsafeBytes { RedirectTokenScrub.clean($0, finder: f, token: token, isURLField: url) }
            }
            .map { String(decoding: $0, as: UTF8.self) }
        }
        // Top-level field removed as before, and nothing else to mask.
        #expect(clean("https://gis/a?f=json&token=SECRET.KEY") == "https://gis/a?f=json")
        // Nested once and twice (ReturnUrl=, next=, redirect_uri=), hex in either case.
        #expect(
            clean("https://idp/login?ReturnUrl=%2Fa%3Ftoken%3DSECRET.KEY")
                == "https://idp/login?ReturnUrl=%2Fa%3Ftoken%3D**********")
        #expect(
            clean("https://idp/login?next=https%253A%252F%252Fgis%252Fa%253Ftoken%253DSECRET%252eKEY")
                == "https://idp/login?next=https%253A%252F%252Fgis%252Fa%253Ftoken%253D"
                + String(repeating: "*", count: 14))
        #expect(
            clean("https://x/?redirect_uri=%53%45%43%52%45%54%2e%4b%45%59") == "https://x/?redirect_uri="
                + String(repeating: "*", count: 30))
        // HTML-escaped separators and entities, `;` separators.
        #expect(clean("https://gis/a?f=json&amp;token=SECRET.KEY") == "https://gis/a?f=json&amp;token=**********")
        #expect(clean("https://gis/a;token=SECRET.KEY") == "https://gis/a;token=**********")
        #expect(clean("https://gis/a?t=SECRET&#46;KEY&#x2E;") == "https://gis/a?t=**************&#x2E;")
        // Any header, not only URLs.
        #expect(
            clean("<https://gis/a?token=SECRET.KEY>; rel=next", url: false)
                == "<https://gis/a?token=**********>; rel=next")
        #expect(clean("last=SECRET%2EKEY; Path=/", url: false) == "last=************; Path=/")
        // Near misses stay as they are.
        #expect(clean("https://gis/a?token=SECRET.KE", url: false) == nil)
        #expect(clean("%%%&#;&#x;SECRET%2", url: false) == nil)
        #expect(clean("SECRET.KEY", url: false, "") == nil)
    }

    @Test func theFinderReportsEachOccurrenceOnce() {
        let f = EncodedTokenFinder("ab")!
        let r = Array("xab%61%62%2561b&#97;&#x62;".utf8).withUnsafeBytes { f.ranges(in: $0) }
        #expect(r == [1..<3, 3..<9, 9..<15, 15..<26])
        #expect(EncodedTokenFinder("") == nil)
    }

    /// The prefilter that spares the common head a per-field pass: it must never miss a head that holds the token.
    @Test func theHeadPrefilterLetsThroughEveryHeadThatMayHoldTheToken() {
        func head(_ lines: [String]) -> ResponseHeadAssembler {
            var a = ResponseHeadAssembler()
            for l in ["HTTP/1.1 302 Found"] + lines + [""] {
                _ = Array((l + "\r\n").utf8).withUnsafeBytes { a.add(line: $0) }
            }
            return a
        }
        let t = "SECRET.KEY"
        #expect(!head(["Date: Fri, 27 Nov 2026 10:00:00 GMT", "Content-Type: text/html"]).mayHold(token: t))
        #expect(head(["Location: https://x/?token=SECRET.KEY"]).mayHold(token: t))
        #expect(head(["Location: https://x/?t=SECRET%2EKEY"]).mayHold(token: t))
        #expect(head(["Link: <https://x/?t=SECRET&#46;KEY>"]).mayHold(token: t))
        #expect(head(["X-Tail: ...SECRET.KEY"]).mayHold(token: t))
        #expect(!head(["X-Near: SECRET.KE"]).mayHold(token: t))
    }
}
