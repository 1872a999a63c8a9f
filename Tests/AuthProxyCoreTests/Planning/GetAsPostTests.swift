import Testing

@testable import AuthProxyCore

/// ``GetAsPost`` as tables: which requests go as a `POST` form, when the URL is too long, and the form made.
@Suite struct GetAsPostTests {
    static func url(_ s: String) -> URLTarget { HTTPURL.parse(s)!.target }

    @Test(arguments: [
        ("/arcgis/rest/services/Parcels/FeatureServer/0/query", true),
        ("/server/rest/services/Hosted/Roads/MapServer/identify", true),
        ("/ARCGIS/REST/SERVICES/x/FeatureServer/0/Query", true),
        ("/arcgis/rest/services/x/FeatureServer/0/queryRelatedRecords", true),
        ("/portal/sharing/rest/search", true),
        ("/arcgis/rest/services/Elevation/ImageServer/getSamples", true),
        ("/arcgis/rest/services/World/MapServer/find", true),
        ("/arcgis/rest/services/World/MapServer/export", true),
        ("/arcgis/rest/services/Elevation/ImageServer/exportImage", true),
        ("/arcgis/rest/services/Utilities/Geometry/GeometryServer/project", true),
        ("/arcgis/rest/services/World/GeocodeServer/findAddressCandidates", true),
        // Edits stay GET (issue 35: a long GET deleteFeatures became a POST and was sent three times).
        ("/arcgis/rest/services/x/FeatureServer/0/deleteFeatures", false),
        ("/arcgis/rest/services/x/FeatureServer/0/applyEdits", false),
        ("/arcgis/rest/services/x/FeatureServer/applyEdits", false),
        ("/arcgis/rest/services/x/FeatureServer/0/addFeatures", false),
        ("/arcgis/rest/services/x/FeatureServer/0/updateFeatures", false),
        ("/portal/sharing/rest/content/users/alice/items/abc/delete", false),
        ("/portal/sharing/rest/content/users/alice/items/abc/update", false),
        ("/portal/sharing/rest/content/users/alice/items/abc/export", false),
        ("/portal/sharing/rest/content/users/alice/items", false),
        ("/arcgis/rest/services/Tool/GPServer/Task/execute", false),
        // Any other operation, known or not, stays GET: the list is of reads.
        ("/api/rest/services/accounts/delete", false),
        ("/arcgis/rest/services/x/FeatureServer/0/someNewOperation", false),
        // Downloads stay GET.
        ("/arcgis/rest/services/Basemap/MapServer/tile/3/2/1", false),
        ("/arcgis/rest/services/Basemap/VectorTileServer/tile/3/2/1.pbf", false),
        ("/arcgis/rest/services/Basemap/MapServer/tilemap/3/0/0/8/8", false),
        ("/arcgis/rest/services/x/FeatureServer/0/12/attachments/3", false),
        ("/portal/sharing/rest/content/items/abc/data", false),
        ("/portal/sharing/rest/content/items/abc/info/thumbnail/t.png", false),
        ("/portal/sharing/rest/content/items/abc/resources/styles/root.json", false),
        // Not an ArcGIS REST operation.
        ("/arcgis/services/x/MapServer/WMSServer", false),
        ("/geoserver/wfs", false),
        ("/geoserver/query", false),
        ("/arcgis/rest/info", false),
        ("/portal/sharing/generateToken", false),
    ])
    func onlyReadOperationsAreConverted(path: String, converted: Bool) {
        #expect(ArcGISOperation.isConvertibleRead(path: path[...]) == converted)
    }

    @Test(arguments: [
        ("/arcgis/rest/services/x/FeatureServer/0/deleteFeatures", true),
        ("/arcgis/rest/services/x/FeatureServer/0/DELETEFEATURES/", true),
        ("/arcgis/rest/services/x/FeatureServer/0/deleteFeature%73", true),
        ("/arcgis/rest/services/x/FeatureServer/0/%61pplyEdits;jsessionid=1", true),
        ("/arcgis/rest/services/x/FeatureServer/0%2FdeleteFeatures", true),
        ("/arcgis/rest/services/x/FeatureServer/0%5cdeleteFeatures", true),
        ("/arcgis/rest/services/x/FeatureServer/0/deleteFeatures%2F", true),
        ("/arcgis/rest/services/x/FeatureServer/0/deleteFeatures%2F%2F", true),
        // Dot-segments a server resolves (issue 35 review: each was retried 3 times).
        ("/arcgis/rest/services/x/FeatureServer/0/deleteFeatures/.", true),
        ("/arcgis/rest/services/x/FeatureServer/0/deleteFeatures/%2e", true),
        ("/arcgis/rest/services/x/FeatureServer/0/deleteFeatures/x/..", true),
        ("/arcgis/rest/services/x/FeatureServer/0/deleteFeatures%2F.", true),
        ("/arcgis/rest/services/x/FeatureServer/0/deleteFeatures/x/..;/", true),
        ("/arcgis/rest/services/x/FeatureServer/0/deleteFeatures/x%5c..", true),
        ("/arcgis/rest/services/x/FeatureServer/0/query/../deleteFeatures", true),
        ("/arcgis/rest/services/x/FeatureServer/0/deleteFeatures/../query", false),
        // Edits named by their verb though not listed.
        ("/arcgis/rest/services/x/UtilityNetworkServer/updateIsConnected", true),
        ("/portal/sharing/rest/content/users/a/items/abc/addComment", true),
        ("/arcgis/rest/services/x/VersionManagementServer/versions/abc/alter", true),
        ("/arcgis/rest/services/x/FeatureServer/0/queryRelatedRecords", false),
        ("/arcgis/rest/services/Utilities/Geometry/GeometryServer/trimExtend", false),
        ("/arcgis/rest/services/World/GeocodeServer/reverseGeocode", false),
        ("/arcgis/rest/services/x/FeatureServer/applyEdits", true),
        ("/portal/sharing/rest/content/users/alice/items/abc/delete", true),
        ("/portal/sharing/rest/content/users/alice/addItem", true),
        ("/arcgis/rest/services/Tool/GPServer/Task/submitJob", true),
        ("/arcgis/rest/services/x/FeatureServer/0/query", false),
        ("/arcgis/rest/services/Basemap/MapServer/tile/3/2/1", false),
        ("/", false),
    ])
    func edits(path: String, edit: Bool) {
        #expect(ArcGISOperation.isEdit(path: path[...]) == edit)
    }

    @Test func everyListedEditBeginsWithAnEditVerb() {
        for edit in ArcGISOperation.edits {
            #expect(ArcGISOperation.isEdit(path: "/arcgis/rest/services/x/FeatureServer/0/\(edit)"), "\(edit)")
        }
    }

    @Test func theQueryIsNotPartOfTheOperation() {
        #expect(ArcGISOperation.isEdit(path: "/arcgis/rest/services/x/FeatureServer/0/deleteFeatures?where=1%3D1"))
        #expect(ArcGISOperation.isEdit(path: "/arcgis/rest/services/x/FeatureServer/0/deleteFeatures/?f=./x/.."))
        #expect(!ArcGISOperation.isEdit(path: "/arcgis/rest/services/x/FeatureServer/0/query?op=/deleteFeatures"))
        #expect(!ArcGISOperation.isEdit(path: "/arcgis/rest/services/x/FeatureServer/0/query?op=%2FdeleteFeatures"))
    }

    @Test func noReadBeginsWithAnEditVerb() {
        for read in ArcGISOperation.serviceReads.union(ArcGISOperation.portalReads) {
            #expect(!ArcGISOperation.isEdit(path: "/arcgis/rest/services/x/MapServer/\(read)"), "\(read)")
        }
    }

    @Test func onlyABodilessGetWithAQueryToAMatchedHost() {
        let q = Self.url("https://gis.example.com/arcgis/rest/services/x/FeatureServer/0/query?where=1%3D1&f=json")
        #expect(GetAsPost.applies(method: "GET", hasBody: false, isUpgrade: false, matched: true, target: q))
        #expect(!GetAsPost.applies(method: "GET", hasBody: false, isUpgrade: false, matched: false, target: q))
        #expect(!GetAsPost.applies(method: "HEAD", hasBody: false, isUpgrade: false, matched: true, target: q))
        #expect(!GetAsPost.applies(method: "POST", hasBody: true, isUpgrade: false, matched: true, target: q))
        #expect(!GetAsPost.applies(method: "GET", hasBody: true, isUpgrade: false, matched: true, target: q))
        #expect(!GetAsPost.applies(method: "GET", hasBody: false, isUpgrade: true, matched: true, target: q))
        let bare = Self.url("https://gis.example.com/arcgis/rest/services/x/FeatureServer/0/query")
        #expect(!GetAsPost.applies(method: "GET", hasBody: false, isUpgrade: false, matched: true, target: bare))
        let empty = Self.url("https://gis.example.com/arcgis/rest/services/x/FeatureServer/0/query?")
        #expect(!GetAsPost.applies(method: "GET", hasBody: false, isUpgrade: false, matched: true, target: empty))
        let edit = Self.url("https://gis.example.com/arcgis/rest/services/x/FeatureServer/0/deleteFeatures?where=1")
        #expect(!GetAsPost.applies(method: "GET", hasBody: false, isUpgrade: false, matched: true, target: edit))
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
