import Testing

@testable import AuthProxyCore

/// The `/proxy?<url>` endpoint's rules (README "Client recipes", ArcGIS JS `proxyUrl`), without sockets.
@Suite struct ProxyEndpointPlannerTests {
    static let store = RequestPlannerTests.store(
        parsing: """
            [proxy]
            listen = ["127.0.0.1:3128"]

            [[credential]]
            name = "open"
            type = "api-key"
            key = "K"
            allow_jsonp = true
            match = ["https://public.example.com/arcgis"]

            [[credential]]
            name = "secure"
            type = "api-key"
            key = "S"
            match = ["https://public.example.com/arcgis/secure"]
            """)

    static func decide(
        _ fields: String, target: String, method: String = "GET",
        allowed: [String] = ["https://app.example.com"]
    ) -> ProxyEndpointDecision {
        var parser = RequestHeadParser()
        let text =
            "\(method) \(target) HTTP/1.1\r\nHost: proxy\r\n" + fields.replacingOccurrences(of: "\n", with: "\r\n")
            + "\r\n"
        guard case .complete(let h, _) = Array(text.utf8).withUnsafeBytes({ parser.parse($0) }) else {
            fatalError(text)
        }
        return RequestPlanner.proxyEndpoint(h, target: target, allowedOrigins: allowed, store: store)
    }

    static func status(_ d: ProxyEndpointDecision) -> String {
        switch d {
        case .refuse(let e, let origin): return "\(e.status)\(origin.map { " cors \($0)" } ?? "")"
        case .preflight(let origin, _): return "preflight \(origin ?? "-")"
        case .forward(let u, let origin): return "forward \(u.url) \(origin ?? "-")"
        }
    }

    @Test(arguments: [
        (
            "Origin: https://app.example.com\n", "/proxy?https://public.example.com/arcgis/rest?f=json",
            "forward https://public.example.com/arcgis/rest?f=json https://app.example.com"
        ),
        (
            "Origin: https://app.example.com\n", "/proxy?https%3A%2F%2Fpublic.example.com%2Farcgis%2Frest",
            "forward https://public.example.com/arcgis/rest https://app.example.com"
        ),
        // An <img> or <script src> load: no Origin, the Referer's origin counts (and no CORS header is due).
        (
            "Referer: https://app.example.com/map.html\n", "/proxy?https://public.example.com/arcgis/rest",
            "forward https://public.example.com/arcgis/rest -"
        ),
        ("", "/proxy?https://public.example.com/arcgis/rest", "403"),
        ("Origin: https://evil.example\n", "/proxy?https://public.example.com/arcgis/rest", "403"),
        ("Origin: null\n", "/proxy?https://public.example.com/arcgis/rest", "403"),
        // After the origin is known good, errors are readable by the app.
        ("Origin: https://app.example.com\n", "/proxy", "400 cors https://app.example.com"),
        (
            "Origin: https://app.example.com\n", "/proxy?https://public.example.com/arcgis/secure/x?callback=cb",
            "403 cors https://app.example.com"
        ),
        (
            "Origin: https://app.example.com\n", "/proxy?https://public.example.com/arcgis/x?callback=cb",
            "forward https://public.example.com/arcgis/x?callback=cb https://app.example.com"
        ),
        // JSONP where no credential applies at all is refused too: nothing opts it in.
        (
            "Origin: https://app.example.com\n", "/proxy?https://other.example.com/x?callback=cb",
            "403 cors https://app.example.com"
        ),
    ])
    func decisions(_ fields: String, _ target: String, _ expected: String) {
        #expect(Self.status(Self.decide(fields, target: target)) == expected, "\(fields) \(target)")
    }

    @Test func offWithoutAllowedOriginsAndPreflightsAnsweredHere() {
        #expect(
            Self.status(Self.decide("Origin: https://app.example.com\n", target: "/proxy?https://x/", allowed: []))
                == "404")
        let d = Self.decide(
            "Origin: https://app.example.com\nAccess-Control-Request-Method: POST\nAccess-Control-Request-Headers: content-type\n",
            target: "/proxy?https://public.example.com/arcgis/rest", method: "OPTIONS")
        guard case .preflight(let origin, let extra) = d else {
            Issue.record("no preflight: \(d)")
            return
        }
        #expect(origin == "https://app.example.com")
        #expect(extra.contains("Access-Control-Allow-Headers: content-type\r\n"))
        #expect(
            Self.status(
                Self.decide("Origin: https://x.example\n", target: "/proxy?https://public.example.com/", allowed: ["*"])
            )
                == "forward https://public.example.com/ https://x.example")
    }
}
