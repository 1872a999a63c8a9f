import Testing

@testable import AuthProxyCore

/// Reading `Web_Map_as_JSON` and writing tokens into it without re-serialising it.
@Suite struct WebMapLayersTests {
    static func read(_ s: String) throws -> WebMapLayers { try WebMapLayers.read(Array(s.utf8)) }

    @Test func findsOperationalAndBasemapLayersWithTheirURLs() throws {
        let map = try Self.read(
            """
            {"mapOptions":{"extent":{"xmin":-1.5e2,"ymin":-90,"xmax":180,"ymax":90}},
             "operationalLayers":[{"id":"a","url":"https:\\/\\/gis.example.com\\/arcgis\\/rest\\/services\\/A\\/MapServer"},
               {"id":"graphics","featureCollection":{"layers":[{"url":"not a layer of the print"}]}},
               {"url":"https://gis.example.com/b","token":"own"}, 7, null],
             "baseMap":{"title":"t","baseMapLayers":[{"url":"https://tiles.example.com/T/MapServer","opacity":1}]},
             "exportOptions":{"dpi":96,"outputSize":[800,600]},"flag":true}
            """)
        #expect(
            map.layers.map(\.url) == [
                "https://gis.example.com/arcgis/rest/services/A/MapServer", "https://gis.example.com/b",
                "https://tiles.example.com/T/MapServer",
            ])
        #expect(map.layers.map(\.hasToken) == [false, true, false])
    }

    @Test func insertsTokensAndLeavesEverythingElseByteForByte() throws {
        let text = #"{ "operationalLayers" : [ {"url":"u1","opacity":0.50}, {"url":"u2"} ], "x":"\u00e9" }"#
        let json = Array(text.utf8)
        let map = try WebMapLayers.read(json)
        let out = WebMapLayers.inserting(
            [(map.layers[1], "T2\"x"), (map.layers[0], "T1")], into: json)
        #expect(
            String(decoding: out, as: UTF8.self)
                == #"{ "operationalLayers" : [ {"token":"T1","url":"u1","opacity":0.50}, {"token":"T2\"x","url":"u2"} ], "x":"\u00e9" }"#
        )
        // What was written reads back, with the tokens in.
        #expect(try WebMapLayers.read(out).layers.map(\.hasToken) == [true, true])
    }

    @Test func decodesEscapesInURLs() throws {
        let map = try Self.read(#"{"operationalLayers":[{"url":"https://h/a\u0020b\ud83d\ude00"}]}"#)
        #expect(map.layers.first?.url == "https://h/a b😀")
    }

    @Test(arguments: [
        "", "[]", #"{"operationalLayers":[{"url":"u"}"#, #"{"operationalLayers":[{"url":"u",}]}"#,
        #"{"a":tru}"#, #"{"a":"\x"}"#, #"{"a":1} x"#, "{\"a\":\"line\nbreak\"}",
        String(repeating: #"{"a":"#, count: 100) + "1" + String(repeating: "}", count: 100),
    ])
    func refusesWhatIsNotAWebMap(_ text: String) {
        #expect(throws: WebMapLayers.Failure.self) { try Self.read(text) }
    }

    @Test func anEmptyLayerObjectGetsNoTrailingComma() throws {
        let json = Array(#"{"operationalLayers":[{}]}"#.utf8)
        // A layer without a url is not a layer the print service loads: nothing to do.
        #expect(try WebMapLayers.read(json).layers.isEmpty)
        let layer = WebMapLayers.Layer(url: "u", hasToken: false, insertAt: 23, isEmpty: true)
        #expect(
            String(decoding: WebMapLayers.inserting([(layer, "T")], into: json), as: UTF8.self)
                == #"{"operationalLayers":[{"token":"T"}]}"#)
    }
}

/// Form fields read and rewritten, and which requests are print jobs.
@Suite struct PrintRequestTests {
    static let services = [
        MatchPrefix.parse("https://gis.example.com/arcgis/rest/services/Utilities/PrintingTools/GPServer")!
    ]

    static func target(_ pathAndQuery: String) -> URLTarget {
        URLTarget(scheme: "https", host: "gis.example.com", port: 443, pathAndQuery: pathAndQuery)
    }

    static let task = "/arcgis/rest/services/Utilities/PrintingTools/GPServer/Export%20Web%20Map%20Task"

    @Test func formFieldLookupAndReplacement() {
        let form = Array("f=json&web_map_as_json=%7B%22a%22%3A1%7D&Format=PNG32&flag".utf8)
        #expect(FormFields.lookup("Web_Map_as_JSON", in: form) == .value(Array(#"{"a":1}"#.utf8)))
        #expect(FormFields.lookup("missing", in: form) == .absent)
        #expect(FormFields.lookup("f", in: Array("f=json&F=pjson".utf8)) == .ambiguous)
        let out = FormFields.replacing("Web_Map_as_JSON", with: Array(#"{"b":"x y&"}"#.utf8), in: form)
        #expect(
            String(decoding: out, as: UTF8.self)
                == "f=json&web_map_as_json=%7B%22b%22%3A%22x%20y%26%22%7D&Format=PNG32&flag")
        #expect(FormFields.lookup("Web_Map_as_JSON", in: out) == .value(Array(#"{"b":"x y&"}"#.utf8)))
    }

    @Test func decidesPrintJobs() {
        func decide(_ method: String, _ path: String, form: Bool = true, length: Int64? = 100) -> PrintRequest.Decision?
        {
            PrintRequest.decide(
                method: method, target: Self.target(path), isForm: form, bodyLength: length, services: Self.services)
        }
        let service = Self.services[0].description
        #expect(decide("POST", Self.task + "/execute") == .rewrite(PrintRequest(service: service, carrier: .form)))
        #expect(
            decide("POST", Self.task + "/submitJob?f=json") == .rewrite(PrintRequest(service: service, carrier: .form)))
        #expect(
            decide("GET", Self.task + "/execute?Web_Map_as_JSON=x", length: nil)
                == .rewrite(PrintRequest(service: service, carrier: .query)))
        #expect(
            decide("POST", Self.task + "/execute", length: nil)
                == .rewrite(PrintRequest(service: service, carrier: .query)))
        // Not a job: the task's page, job status, other methods; their answers are scrubbed. Other services: nothing.
        #expect(decide("GET", Self.task + "?f=json") == .echoes(service: service))
        #expect(decide("GET", Self.task + "/jobs/j1?f=json") == .echoes(service: service))
        #expect(decide("PUT", Self.task + "/execute") == .echoes(service: service))
        #expect(decide("POST", "/arcgis/rest/services/Other/GPServer/Task/execute") == nil)
        // Not held: forwarded as sent, with the reason.
        guard case .tooLarge(_, let chunked)? = decide("POST", Self.task + "/execute", length: -1),
            case .tooLarge(_, let large)? = decide(
                "POST", Self.task + "/execute", length: PrintRequest.maxBodyBytes + 1),
            case .tooLarge(_, let multipart)? = decide("POST", Self.task + "/execute", form: false)
        else {
            Issue.record("expected tooLarge")
            return
        }
        #expect(chunked.contains("chunked") && large.contains("larger") && multipart.contains("multipart"))
    }

    @Test func planHoldsTheFormOfAPrintJobOnly() throws {
        let store = RequestPlannerTests.store(
            parsing: """
                [[credential]]
                name = "gis"
                type = "api-key"
                key = "K"
                match = ["https://gis.example.com/arcgis"]
                print_services = ["https://gis.example.com/arcgis/rest/services/Utilities/PrintingTools/GPServer"]
                token_placement = "header"
                """)
        let job = RequestPlannerTests.plan(
            "POST https://gis.example.com\(Self.task)/execute HTTP/1.1\nHost: gis.example.com\nContent-Type: application/x-www-form-urlencoded\nContent-Length: 10\n\n",
            store: store)
        guard case .success(let p) = job else {
            Issue.record("not planned")
            return
        }
        #expect(p.holdsBody && p.print == .rewrite(PrintRequest(service: Self.services[0].description, carrier: .form)))
        let query = RequestPlannerTests.plan(
            "POST https://gis.example.com/arcgis/rest/services/A/FeatureServer/0/query HTTP/1.1\nHost: gis.example.com\nContent-Type: application/x-www-form-urlencoded\nContent-Length: 10\n\n",
            store: store)
        guard case .success(let q) = query else {
            Issue.record("not planned")
            return
        }
        #expect(!q.holdsBody && q.print == nil)
    }
}

/// Which layers get which credential's token, and which tokens go in.
@Suite struct PrintTokenPlanTests {
    static let print = "https://fed.example.com/arcgis/rest/services/Utilities/PrintingTools/GPServer"
    static let store = RequestPlannerTests.store(
        parsing: """
            [[credential]]
            name = "fed"
            type = "arcgis-token"
            username = "u"
            password = "p"
            match = ["https://portal.example.com/portal", "https://fed.example.com/arcgis"]
            print_services = ["\(print)"]

            [[credential]]
            name = "other"
            type = "arcgis-token"
            username = "u"
            password = "p"
            match = ["https://other.example.com/arcgis"]
            print_services = ["https://other.example.com/arcgis/rest/services/Utilities/PrintingTools/GPServer"]

            [[credential]]
            name = "header"
            type = "header"
            headers = { "X-Key" = "V" }
            match = ["https://h.example.com"]
            """)

    static func layer(_ url: String, token: Bool = false, at: Int = 0) -> WebMapLayers.Layer {
        WebMapLayers.Layer(url: url, hasToken: token, insertAt: at, isEmpty: false)
    }

    @Test func onlyLayersWhoseCredentialListsThisPrintService() {
        let map = WebMapLayers(layers: [
            Self.layer("https://fed.example.com/arcgis/rest/services/A/MapServer"),
            Self.layer("https://fed.example.com/arcgis/rest/services/B/MapServer", token: true),
            Self.layer("https://other.example.com/arcgis/rest/services/C/MapServer"),
            Self.layer("https://h.example.com/x"),
            Self.layer("https://public.example.com/arcgis/rest/services/D/MapServer"),
            Self.layer("not a url"),
        ])
        let printTarget = HTTPURL.parse(Self.print + "/Export%20Web%20Map%20Task/execute")!.target
        let wanted = PrintTokenPlan.wanted(map, printTarget: printTarget, store: Self.store)
        #expect(wanted.map(\.credential.name) == ["fed"])
        #expect(wanted.map(\.layer.url) == ["https://fed.example.com/arcgis/rest/services/A/MapServer"])
        // Another print service, listed by no one: nothing.
        let elsewhere = HTTPURL.parse("https://fed.example.com/arcgis/rest/services/Custom/GPServer/T/execute")!.target
        #expect(PrintTokenPlan.wanted(map, printTarget: elsewhere, store: Self.store).isEmpty)
    }

    @Test func tokensBoundToAnotherRefererOrSSLOverHTTPAreLeftOut() {
        let fed = Self.store.credentials[0]
        func wanted(_ url: String) -> PrintTokenPlan.Wanted {
            PrintTokenPlan.Wanted(layer: Self.layer(url), credential: fed, target: HTTPURL.parse(url)!.target)
        }
        func token(_ v: String, ssl: Bool = false, referer: String? = nil) -> IssuedToken {
            IssuedToken(value: v, expires: nil, issued: 0, ssl: ssl, referer: referer)
        }
        let got: [(PrintTokenPlan.Wanted, IssuedToken)] = [
            (wanted("https://a/1"), token("A", referer: "app://one")),
            (wanted("https://a/2"), token("B", referer: "app://two")),
            (wanted("http://a/3"), token("C", ssl: true)),
            (wanted("https://a/4"), token("D")),
        ]
        let ins = PrintTokenPlan.insertions(got, requestReferer: nil)
        #expect(ins.tokens.map(\.token) == ["A", "D"])
        #expect(ins.referer == "app://one")
        #expect(ins.skipped.map(\.credential) == ["fed", "fed"])
        #expect(!ins.skipped.map(\.why).joined().contains("B"))
        // The print request's own credential binds its Referer already: tokens must share it, and none is added.
        let same = PrintTokenPlan.insertions(got, requestReferer: "app://two")
        #expect(same.tokens.map(\.token) == ["B", "D"] && same.referer == nil)
    }
}

@Suite struct PrintTokenLedgerTests {
    @Test func keepsTokensPerServiceUntilTheyExpireAndBoundsTheirNumber() {
        var ledger = PrintTokenLedger()
        ledger.record(service: "s", tokens: [("A", expires: 200_000), ("B", expires: nil)], now: 0)
        ledger.record(service: "t", tokens: [("C", expires: 200_000)], now: 0)
        #expect(ledger.tokens(service: "s", now: 1000) == ["A", "B"])
        #expect(ledger.tokens(service: "t", now: 1000) == ["C"])
        #expect(ledger.tokens(service: "s", now: 300_000) == ["B"])
        #expect(ledger.tokens(service: "s", now: PrintTokenLedger.defaultKeepMillis + 1).isEmpty)
        for i in 0..<(PrintTokenLedger.maxPerService + 10) {
            ledger.record(service: "u", tokens: [("T\(i)", expires: nil)], now: 0)
        }
        let kept = ledger.tokens(service: "u", now: 0)
        #expect(kept.count == PrintTokenLedger.maxPerService && kept.last == "T\(PrintTokenLedger.maxPerService + 9)")
    }
}
