import Testing

@testable import AuthProxyCore

@Suite struct ProxyEndpointTargetTests {
    private func url(_ q: String) -> String? { ProxyEndpointTarget.url(fromQuery: Substring(q)) }

    @Test func theSDKsFormIsTakenAsItIs() {
        let q = "https://gis.example.com/arcgis/rest/services/x/MapServer/export?bbox=-1,2,3,4&size=400,400&f=image"
        #expect(url(q) == q)
        // Encoded fields inside an unencoded URL stay encoded (and `+` stays `+`).
        #expect(
            url("https://h/q?where=1%3D1&text=a+b&u=http%3A%2F%2Fx")
                == "https://h/q?where=1%3D1&text=a+b&u=http%3A%2F%2Fx")
        #expect(url("ftp://h/x") == "ftp://h/x")  // refused later, as a URL
    }

    @Test func anEncodedURLIsDecodedOnce() {
        #expect(
            url(
                "https%3A%2F%2Fgis.example.com%2Farcgis%2Frest%2Fservices%2Fx%2FFeatureServer%2F0%2Fquery%3Fwhere%3D1%253D1%26f%3Djson"
            )
                == "https://gis.example.com/arcgis/rest/services/x/FeatureServer/0/query?where=1%3D1&f=json")
        #expect(url("HTTP%3a%2f%2fh%3A8080%2Fa") == "HTTP://h:8080/a")
        #expect(url("http%3A%2F%2Fh%2Fa%3Fq%3Da+b") == "http://h/a?q=a+b")
    }

    @Test func anEncodedFormThatIsNoRequestTargetIsRefused() {
        #expect(url("https%3A%2F%2Fh%2Fa%3Fq%3Da%20b") == nil)  // a space
        #expect(url("https%3A%2F%2Fh%2Fa%0D%0AX-Injected%3A%201") == nil)  // CR LF
        #expect(url("https%3A%2F%2Fh%2F%C3%A9") == nil)  // non-ASCII
        #expect(url("https%3A%2F%2Fh%2Fa%2") == nil)  // a cut escape
        #expect(url("https%3A%2F%2Fh%2Fa%zz") == nil)
    }
}
