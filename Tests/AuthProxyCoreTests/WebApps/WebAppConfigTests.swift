import Testing

@testable import AuthProxyCore

/// `[[app]]` in the configuration, origin → app matching and the credentials each app's users get.
@Suite struct WebAppConfigTests {
    static let credentials = """
        [[credential]]
        name = "parcels"
        type = "api-key"
        key = "P"
        match = ["https://gis.example.com/arcgis"]

        [[credential]]
        name = "editing"
        type = "api-key"
        key = "E"
        match = ["https://gis.example.com/arcgis"]

        """

    static func load(_ apps: String) throws(ConfigError) -> ProxyConfig {
        try ConfigLoader(environment: [:]).parse("[proxy]\nlisten = [\"127.0.0.1:3128\"]\n\n" + credentials + apps)
    }

    @Test func appsWithRulesAreRead() throws {
        let c = try Self.load(
            """
            [[app]]
            name = "parcels"
            origins = ["https://Parcels.example.com", "http://localhost:8080"]
            credentials = ["parcels"]
            sign_in_issuer = "https://idp.example.com/realms/gis"
            sign_in_audience = "parcels-app"
            clock_skew_seconds = 30

            [[app.user_rule]]
            claim = "groups"
            value = "editors"
            credentials = ["editing"]

            [[app]]
            name = "public"
            origins = "https://public.example.com"
            credentials = []
            """)
        #expect(c.apps.count == 2)
        let a = c.apps[0]
        #expect(a.origins == ["https://parcels.example.com", "http://localhost:8080"])
        #expect(
            a.signIn
                == SignInPolicy(
                    issuer: "https://idp.example.com/realms/gis", audiences: ["parcels-app"], clockSkewSeconds: 30,
                    rules: [UserRule(claim: "groups", value: "editors", credentials: ["editing"])]))
        #expect(c.apps[1].credentials.isEmpty && c.apps[1].signIn == nil)
        let access = WebAppAccess(apps: c.apps, credentials: c.credentials)
        let d = access.directory
        #expect(d.app(forOrigin: "https://PARCELS.example.com") == 0)
        #expect(d.app(forOrigin: "https://public.example.com") == 1)
        #expect(d.app(forOrigin: "https://other.example.com") == nil)
        #expect(access.store(app: 0, rule: nil).credentials.map(\.name) == ["parcels"])
        #expect(access.store(app: 0, rule: 0).credentials.map(\.name) == ["editing"])
        #expect(access.store(app: 1, rule: nil).credentials.isEmpty)
    }

    @Test(arguments: [
        ("[[app]]\nname = \"a\"\norigins = [\"https://a.example.com/app\"]\ncredentials = []\n", "app[0].origins"),
        ("[[app]]\nname = \"a\"\norigins = [\"*\"]\ncredentials = []\n", "app[0].origins"),
        ("[[app]]\nname = \"a\"\norigins = [\"https://a.example.com\"]\n", "app[0].credentials"),
        (
            "[[app]]\nname = \"a\"\norigins = [\"https://a.example.com\"]\ncredentials = [\"nope\"]\n",
            "app[0].credentials"
        ),
        (
            "[[app]]\nname = \"a\"\norigins = [\"https://a.example.com\"]\ncredentials = []\n"
                + "[[app]]\nname = \"b\"\norigins = [\"https://A.example.com\"]\ncredentials = []\n", "app[1].origins"
        ),
        (
            "[[app]]\nname = \"a\"\norigins = [\"https://a.example.com\"]\ncredentials = []\nsign_in_audience = \"x\"\n",
            "app[0].sign_in_audience"
        ),
        (
            "[[app]]\nname = \"a\"\norigins = [\"https://a.example.com\"]\ncredentials = []\nsign_in_issuer = \"https://idp\"\n",
            "app[0].sign_in_audience"
        ),
        (
            "[[app]]\nname = \"a\"\norigins = [\"https://a.example.com\"]\ncredentials = []\nsign_in_issuer = \"https://idp\"\nsign_in_audience = \"x\"\n[[app.user_rule]]\nclaim = \"groups\"\nvalue = \"e\"\ncredentials = [\"missing\"]\n",
            "app[0].user_rule[0].credentials"
        ),
        (
            "[[app]]\nname = \"a\"\norigins = [\"https://a.example.com\"]\ncredentials = []\norigin = \"x\"\n",
            "app[0].origin"
        ),
    ])
    func mistakesNameTheKey(_ apps: String, key: String) {
        #expect {
            _ = try Self.load(apps)
        } throws: { e in
            (e as? ConfigError)?.key == key
        }
    }

    @Test func plannerAdmitsAppOriginsWithoutAllowedOrigins() {
        let directory = WebAppDirectory([WebApp(name: "a", origins: ["https://a.example.com"], credentials: [])])
        func decide(_ fields: String) -> ProxyEndpointDecision {
            let h = RequestPlannerTests.head("GET /proxy?https://gis.example.com/x HTTP/1.1\nHost: p\n\(fields)\n\n")
            return RequestPlanner.proxyEndpoint(
                h, target: "/proxy?https://gis.example.com/x", allowedOrigins: [], store: CredentialStore([]),
                apps: directory)
        }
        guard case .forward(_, let origin) = decide("Origin: https://a.example.com") else {
            Issue.record("the app's origin was refused")
            return
        }
        #expect(origin == "https://a.example.com")
        guard case .forward = decide("Referer: https://a.example.com/map.html") else {
            Issue.record("the app's Referer was refused")
            return
        }
        guard case .refuse(let e, _) = decide("Origin: https://b.example.com") else {
            Issue.record("another origin was admitted")
            return
        }
        #expect(e.status == 403 && e.message.contains("https://b.example.com"))
    }
}
