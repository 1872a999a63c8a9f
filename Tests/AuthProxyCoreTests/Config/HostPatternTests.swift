import Testing

@testable import AuthProxyCore

/// `[tls] no_intercept` entries: what they accept and which CONNECT targets they cover.
@Suite struct HostPatternTests {
    @Test(arguments: [
        ("iis.corp", "iis.corp"), ("IIS.Corp.", "iis.corp"), ("iis.corp:8443", "iis.corp:8443"),
        ("*.farm.corp", "*.farm.corp"), ("*.farm.corp:443", "*.farm.corp:443"), ("[::1]", "[::1]"),
        ("[fd00::5]:443", "[fd00::5]:443"), ("10.0.0.5", "10.0.0.5"), ("gisserver", "gisserver"),
    ])
    func accepted(_ text: String, _ shown: String) throws {
        #expect(try #require(HostPattern.parse(text)).description == shown)
    }

    @Test(arguments: [
        "", "https://iis.corp", "iis.corp/x", "*", "*.", "a*.corp", "iis.corp:0", "iis.corp:x", "user@iis.corp",
        "*.[::1]",
    ])
    func refused(_ text: String) {
        #expect(HostPattern.parse(text) == nil, "\(text)")
    }

    @Test func matching() throws {
        let rows: [(pattern: String, host: String, port: Int, expected: Bool)] = [
            ("iis.corp", "iis.corp", 443, true),
            ("iis.corp", "iis.corp", 8443, true),  // no port: every port
            ("iis.corp", "IIS.CORP.", 443, true),
            ("iis.corp", "x.iis.corp", 443, false),
            ("iis.corp:8443", "iis.corp", 443, false),
            ("iis.corp:8443", "iis.corp", 8443, true),
            ("*.farm.corp", "a.farm.corp", 443, true),
            ("*.farm.corp", "a.b.farm.corp", 443, true),
            ("*.farm.corp", "farm.corp", 443, false),
            ("*.farm.corp", "xfarm.corp", 443, false),
            ("*.farm.corp:443", "a.farm.corp", 8443, false),
            ("[::1]:443", "::1", 443, true),
        ]
        for r in rows {
            #expect(
                try #require(HostPattern.parse(r.pattern)).matches(host: r.host, port: r.port) == r.expected,
                "\(r.pattern) ~ \(r.host):\(r.port)")
        }
    }
}
