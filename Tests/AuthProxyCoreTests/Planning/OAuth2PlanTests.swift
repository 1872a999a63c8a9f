import Testing

@testable import AuthProxyCore

/// An `oauth2` credential in the planner: every matched path gets its token (not only ArcGIS APIs), in its own
/// placement, and a client's own authorization is left alone unless overridden.
@Suite struct OAuth2PlanTests {
    static let store = RequestPlannerTests.store(
        parsing: """
            [[credential]]
            name = "kc"
            type = "oauth2"
            token_url = "https://idp.example.com/token"
            client_id = "c"
            client_secret = "s"
            match = ["https://ogc.example.com/"]

            [[credential]]
            name = "q"
            type = "oauth2"
            token_url = "https://idp.example.com/token"
            client_id = "c"
            client_secret = "s"
            token_placement = "query"
            override_client_token = true
            match = ["https://geo.example.com/geoserver"]
            """)

    @Test(arguments: [
        ("GET https://ogc.example.com/collections/x/items HTTP/1.1\nHost: ogc.example.com\n\n", "kc header"),
        ("GET https://ogc.example.com/index.html HTTP/1.1\nHost: ogc.example.com\n\n", "kc header"),
        ("GET https://ogc.example.com/x HTTP/1.1\nHost: ogc.example.com\nAuthorization: Basic dTpw\n\n", "none"),
        ("GET https://ogc.example.com/x?access_token=mine HTTP/1.1\nHost: ogc.example.com\n\n", "none"),
        ("GET https://ogc.example.com/x?token=arcgis HTTP/1.1\nHost: ogc.example.com\n\n", "kc header"),
        (
            "POST https://ogc.example.com/x HTTP/1.1\nHost: ogc.example.com\nContent-Type: application/x-www-form-urlencoded\nContent-Length: 3\n\n",
            "kc header"
        ),
        ("GET https://geo.example.com/geoserver/wfs?access_token=mine HTTP/1.1\nHost: geo.example.com\n\n", "q query"),
        (
            "POST https://geo.example.com/geoserver/wfs HTTP/1.1\nHost: geo.example.com\nContent-Type: application/x-www-form-urlencoded\nContent-Length: 3\n\n",
            "q query"
        ),
    ])
    func tokens(_ request: String, _ expected: String) {
        #expect(
            RequestPlannerTests.token(RequestPlannerTests.plan(request, store: Self.store)) == expected, "\(request)")
    }

    @Test func aBodyIsKeptForTheRetry() throws {
        let p = try RequestPlannerTests.plan(
            "PUT https://ogc.example.com/x HTTP/1.1\nHost: ogc.example.com\nContent-Length: 3000000\n\n",
            store: Self.store
        ).get()
        #expect(p.replayLimit == 100)  // max_replay_bytes of the test settings
    }
}
