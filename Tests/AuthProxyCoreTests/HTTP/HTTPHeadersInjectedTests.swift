import Testing

@testable import AuthProxyCore

/// A field the proxy sets is not the client's to name as hop-by-hop.
@Suite struct HTTPHeadersInjectedTests {
    @Test func anInjectedFieldLeavesTheClientsConnectionLists() {
        var h = HTTPHeaders([
            ("Host", "gis"), ("Connection", "keep-alive, X-Esri-Authorization , referer"),
            ("Proxy-Connection", "x-esri-authorization"), ("X-Esri-Authorization", "Bearer client"),
        ])
        h.setInjected(name: "X-Esri-Authorization", value: "Bearer KEY")
        #expect(h.values("connection") == ["keep-alive, referer"])
        #expect(h.values("proxy-connection") == [])
        #expect(h.values("x-esri-authorization") == ["Bearer KEY"])
        var forwarded: [String] = []
        h.forEachForwardedField { name, value in forwarded.append("\(name): \(value)") }
        #expect(forwarded == ["X-Esri-Authorization: Bearer KEY"])
    }

    @Test func withoutConnectionListsItReplacesTheField() {
        var h = HTTPHeaders([("Referer", "https://a/"), ("Accept", "*/*")])
        h.setInjected(name: "Referer", value: "https://b/")
        #expect(h == HTTPHeaders([("Accept", "*/*"), ("Referer", "https://b/")]))
    }
}
