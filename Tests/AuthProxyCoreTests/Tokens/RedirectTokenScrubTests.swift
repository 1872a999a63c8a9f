import Testing

@testable import AuthProxyCore

private func scrub(_ value: String, _ token: String = "SECRET-KEY") -> String? {
    Array(value.utf8).withUnsafeBytes { RedirectTokenScrub.scrub($0, token: token) }.map { String(decoding: $0, as: UTF8.self) }
}

@Suite struct RedirectTokenScrubTests {
    @Test func theInjectedTokenLeavesTheURLAndNothingElseChanges() {
        #expect(scrub("https://gis/arcgis/rest/services?f=json&token=SECRET-KEY") == "https://gis/arcgis/rest/services?f=json")
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
            Array(body.utf8).withUnsafeBytes { RedirectTokenScrub.mask($0, token: token) }.map { String(decoding: $0, as: UTF8.self) }
        }
        #expect(mask("<a href=\"https://h/a?token=SECRET-KEY&f=json\">") == "<a href=\"https://h/a?token=**********&f=json\">")
        #expect(mask("SECRET-KEYSECRET-KEY") == "********************")
        #expect(mask("a+b/= and a%2Bb%2F%3D", "a+b/=") == "***** and ***********")
        #expect(mask("nothing here") == nil)
        #expect(mask("SECRET") == nil)
    }
}
