import Testing

@testable import AuthProxyCore

/// ``GetAsPost`` as tables: which requests go as a `POST` form, when the URL is too long, and the form made.
@Suite struct GetAsPostTests {
    static func url(_ s: String) -> URLTarget { HTTPURL.parse(s)!.target }

    @Test(arguments: [
        ("/arcgis/rest/services/Parcels/FeatureServer/0/query", true),
        ("/server/rest/services/Hosted/Roads/MapServer/identify", true),
        ("/ARCGIS/REST/SERVICES/x/FeatureServer/0/Query", true),
        ("/portal/sharing/rest/search", true),
        ("/portal/sharing/rest/content/users/alice/items", true),
        ("/arcgis/rest/services/Elevation/ImageServer/getSamples", true),
        ("/arcgis/rest/services/World/MapServer/find", true),
        // Downloads stay GET.
        ("/arcgis/rest/services/Basemap/MapServer/tile/3/2/1", false),
        ("/arcgis/rest/services/Basemap/VectorTileServer/tile/3/2/1.pbf", false),
        ("/arcgis/rest/services/Basemap/MapServer/tilemap/3/0/0/8/8", false),
        ("/arcgis/rest/services/World/MapServer/export", false),
        ("/arcgis/rest/services/Elevation/ImageServer/exportImage", false),
        ("/arcgis/rest/services/x/FeatureServer/0/12/attachments/3", false),
        ("/portal/sharing/rest/content/items/abc/data", false),
        ("/portal/sharing/rest/content/items/abc/info/thumbnail/t.png", false),
        ("/portal/sharing/rest/content/items/abc/resources/styles/root.json", false),
        // Not an ArcGIS REST operation.
        ("/arcgis/services/x/MapServer/WMSServer", false),
        ("/geoserver/wfs", false),
        ("/arcgis/rest/info", false),
        ("/portal/sharing/generateToken", false),
    ])
    func restOperations(path: String, operation: Bool) {
        #expect(GetAsPost.isRESTOperation(path: path[...]) == operation)
    }

    @Test func onlyABodilessGetWithAQuery() {
        let q = Self.url("https://gis.example.com/arcgis/rest/services/x/FeatureServer/0/query?where=1%3D1&f=json")
        #expect(GetAsPost.applies(method: "GET", hasBody: false, isUpgrade: false, target: q))
        #expect(!GetAsPost.applies(method: "HEAD", hasBody: false, isUpgrade: false, target: q))
        #expect(!GetAsPost.applies(method: "POST", hasBody: true, isUpgrade: false, target: q))
        #expect(!GetAsPost.applies(method: "GET", hasBody: true, isUpgrade: false, target: q))
        #expect(!GetAsPost.applies(method: "GET", hasBody: false, isUpgrade: true, target: q))
        let bare = Self.url("https://gis.example.com/arcgis/rest/services/x/FeatureServer/0/query")
        #expect(!GetAsPost.applies(method: "GET", hasBody: false, isUpgrade: false, target: bare))
        let empty = Self.url("https://gis.example.com/arcgis/rest/services/x/FeatureServer/0/query?")
        #expect(!GetAsPost.applies(method: "GET", hasBody: false, isUpgrade: false, target: empty))
    }

    @Test func theLengthIsThatOfTheWholeURLAsSent() {
        let base = "https://gis.example.com/arcgis/rest/services/x/FeatureServer/0/query?where="
        for n in [0, 1, 100, 1900, 2000, 2100, 5000] {
            let s = base + String(repeating: "a", count: n)
            let u = Self.url(s)
            #expect(u.url.utf8.count == s.utf8.count)
            #expect(GetAsPost.exceeds(u, limit: 2048) == (s.utf8.count > 2048), "\(n)")
            #expect(GetAsPost.exceeds(u, limit: s.utf8.count) == false)
            #expect(GetAsPost.exceeds(u, limit: s.utf8.count - 1) == true)
            #expect(GetAsPost.exceeds(u, limit: 0) == false)
        }
        // A port and an IPv6 literal count as written.
        for s in ["http://gis.example.com:6080/arcgis/rest/services/q?w=1", "http://[::1]:8080/a/rest/services/q?w=1"] {
            let u = Self.url(s)
            #expect(GetAsPost.exceeds(u, limit: s.utf8.count - 1))
            #expect(!GetAsPost.exceeds(u, limit: s.utf8.count))
        }
    }

    @Test func theFormIsTheQueryAsSent() {
        let u = Self.url(
            "https://gis.example.com/arcgis/rest/services/x/FeatureServer/0/query?where=NAME%20LIKE%20%27A%25%27&token=T%2B1&f=json"
        )
        let form = GetAsPost.form(of: u)
        #expect(form.target.pathAndQuery == "/arcgis/rest/services/x/FeatureServer/0/query")
        #expect(form.target.host == "gis.example.com")
        #expect(String(decoding: form.body, as: UTF8.self) == "where=NAME%20LIKE%20%27A%25%27&token=T%2B1&f=json")
    }
}
