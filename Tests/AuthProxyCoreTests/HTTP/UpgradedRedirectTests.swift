import Testing

@testable import AuthProxyCore

private func rewrite(
    _ value: String,
    client: URLTarget = URLTarget(scheme: "http", host: "gis.example.com", port: 80, pathAndQuery: "/"),
    upgraded: @escaping (URLTarget) -> Bool = { $0.path.hasPrefix("/arcgis") }
) -> String? {
    let upstream = URLTarget(
        scheme: "https", host: client.host, port: client.port == 80 ? 443 : client.port, pathAndQuery: "/")
    return Array(value.utf8).withUnsafeBytes {
        UpgradedRedirect.rewrite($0, upstream: upstream, client: client, isUpgraded: upgraded)
    }.map { String(decoding: $0, as: UTF8.self) }
}

@Suite struct UpgradedRedirectTests {
    @Test func theUpgradedOriginGoesBackAsTheClientsOne() {
        #expect(
            rewrite("https://gis.example.com/arcgis/rest/services/?f=json")
                == "http://gis.example.com/arcgis/rest/services/?f=json")
        #expect(rewrite("HTTPS://GIS.example.com:443/arcgis/rest") == "http://gis.example.com/arcgis/rest")
        #expect(rewrite("0; url=https://gis.example.com/arcgis/x") == "0; url=http://gis.example.com/arcgis/x")
        let other = URLTarget(scheme: "http", host: "gis.example.com", port: 8443, pathAndQuery: "/")
        #expect(
            rewrite("https://gis.example.com:8443/arcgis/a?b#c", client: other)
                == "http://gis.example.com:8443/arcgis/a?b#c")
    }

    @Test func otherPlacesStayAsTheServerWroteThem() {
        #expect(rewrite("https://gis.example.com/portal/home/") == nil)  // not upgraded: never sent to plain http
        #expect(rewrite("https://other.example.com/arcgis/rest") == nil)
        #expect(rewrite("https://gis.example.com:8443/arcgis/rest") == nil)
        #expect(rewrite("http://gis.example.com/arcgis/rest") == nil)
        #expect(rewrite("/arcgis/rest/services/") == nil)  // relative: resolved against the client's URL anyway
        #expect(rewrite("https://user@gis.example.com/arcgis/rest") == nil)
        //expect(rewrite("https://gis.example.com") == nil)  // the root is not under the upgraded /arcgis
    }
}
