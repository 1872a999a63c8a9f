import Testing

@testable import AuthProxyCore

/// The libcurl adapter writes a request's fields in libcurl's syntax; the request itself carries plain fields.
@Suite struct UpstreamRequestLinesTests {
    @Test func forwardedFieldsViaAndWhatLibcurlMustNotAdd() {
        var r = UpstreamRequest(
            method: "GET", url: "http://h/x",
            fields: HTTPHeaders([
                ("Host", "h"), ("X-Empty", ""),
                ("Connection", "keep-alive, X-Hop"), ("X-Hop", "1"), ("Content-Length", "0"),
                ("Expect", "100-continue"),
                ("Referer", "http://app/"),
            ]), bodyLength: nil, timeoutSeconds: 5)
        r.via = "1.1 authproxy"
        #expect(
            CurlTransfer.headerLines(r) == [
                "X-Empty;", "Referer: http://app/", "Via: 1.1 authproxy", "Expect:", "Accept:",
            ])
        r.fields.add(name: "Accept", value: "application/json")
        r.via = nil
        #expect(
            CurlTransfer.headerLines(r) == [
                "X-Empty;", "Referer: http://app/", "Accept: application/json", "Expect:",
            ])
    }
}
