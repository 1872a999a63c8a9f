import CZlib
import Testing

@testable import AuthProxyCore

@Suite struct TokenRejectionTests {
    private func check(_ status: Int, _ ct: String?, _ body: String) -> Bool {
        TokenRejection.isRejection(status: status, contentType: ct, body: Array(body.utf8))
    }

    @Test(arguments: [
        ("application/json", true), ("Application/JSON; charset=UTF-8", true), ("text/plain", true),
        ("TEXT/HTML", true), ("application/x-javascript", true), ("application/xhtml+xml", true),
        ("application/geo+json", true), ("image/png", false), ("application/octet-stream", false),
        ("application/vnd.mapbox-vector-tile", false), ("tex/", false), ("", false), ("json", true),
        ("jso", false), ("application/x-protobuf", false), ("text\u{0F}plain", false),
    ])
    func contentTypesHeldForInspection(_ ct: String, _ held: Bool) {
        #expect(TokenRejection.mayCarryError(contentType: ct) == held, "\(ct)")
        #expect(TokenRejection.mayCarryError(contentTypeBytes: Array(ct.utf8)[...]) == held, "\(ct)")
    }

    @Test(arguments: [
        (200, "application/json", #"{"error":{"code":498,"message":"Invalid token.","details":[]}}"#),
        (
            200, "application/json",
            #"{"error":{"code":499,"message":"Token Required","messageCode":"GWM_0003","details":[]}}"#
        ),
        (200, "application/json", "{ \"error\" : {\n \"code\" : 498 ,\n \"message\" : \"Invalid token.\" } }"),
        (200, "text/plain", #"  {"error":{"message":"Invalid token.","details":["x"],"code":498}}"#),
        (200, "text/javascript", #"cb({"error":{"code":498,"message":"Invalid token.","details":[]}});"#),
        (
            200, "application/javascript",
            "dojo_request_script_callbacks.dojo_request_script0 ( {\"error\": {\"code\": 499}})"
        ),
        (200, "text/html", "<html><body><h1>Invalid Token</h1></body></html>"),
        (498, "application/json", "{}"),
        (499, nil, ""),
    ])
    func detects(_ status: Int, _ ct: String?, _ body: String) {
        #expect(check(status, ct, body), "\(body)")
    }

    @Test(arguments: [
        (
            403, "application/json",
            #"{"error":{"code":403,"message":"You do not have permissions","messageCode":"GWM_0003","details":[]}}"#
        ),
        (200, "application/json", #"{"features":[{"attributes":{"code":498}}],"error":{"code":498}}"#),
        (
            200, "application/json",
            #"{"error":{"code":400,"message":"Unable to complete operation.","details":["code 498"]}}"#
        ),
        (200, "image/png", "Invalid Token"),
        (200, "application/json", #"{"error":{"details":{"code":498},"code":500}}"#),
        (200, "text/html", "<html>ok</html>"),
    ])
    func ignores(_ status: Int, _ ct: String?, _ body: String) {
        #expect(!check(status, ct, body), "\(body)")
    }
}

@Suite struct TokenInjectionTests {
    @Test func queryPlacementReplacesClientToken() {
        let r = TokenInjection.apply(
            token: "new/tok+en", site: .query, pathAndQuery: "/a/query?f=json&token=old&Token=x",
            headers: HTTPHeaders([("X-Esri-Authorization", "Bearer c")]), form: nil)
        #expect(r.pathAndQuery == "/a/query?f=json&token=new%2Ftok%2Ben")
        #expect(!r.headers.contains("x-esri-authorization"))
    }

    @Test func queryPlacementWithoutQuery() {
        #expect(
            TokenInjection.apply(token: "t", site: .query, pathAndQuery: "/x", headers: HTTPHeaders(), form: nil)
                .pathAndQuery == "/x?token=t")
        #expect(
            TokenInjection.apply(
                token: "t", site: .query, pathAndQuery: "/x?token=a", headers: HTTPHeaders(), form: nil
            ).pathAndQuery == "/x?token=t")
    }

    @Test func headerPlacement() {
        let r = TokenInjection.apply(
            token: "t", site: .header, pathAndQuery: "/x?token=a&f=json",
            headers: HTTPHeaders([("Authorization", "Bearer z"), ("Accept", "*/*")]), form: nil)
        #expect(r.pathAndQuery == "/x?f=json")
        #expect(r.headers.values("x-esri-authorization") == ["Bearer t"])
        #expect(!r.headers.contains("authorization"))
    }

    @Test func formPlacement() {
        let r = TokenInjection.apply(
            token: "t", site: .form, pathAndQuery: "/q", headers: HTTPHeaders(),
            form: Array("where=1%3D1&token=old&f=json".utf8))
        #expect(String(decoding: r.form!, as: UTF8.self) == "where=1%3D1&f=json&token=t")
        #expect(r.pathAndQuery == "/q")
    }

    @Test func siteChoice() {
        #expect(TokenInjection.site(placement: .param, method: "GET", isForm: false) == .query)
        #expect(TokenInjection.site(placement: .param, method: "DELETE", isForm: true) == .query)
        #expect(TokenInjection.site(placement: .param, method: "POST", isForm: true) == .form)
        #expect(TokenInjection.site(placement: .param, method: "POST", isForm: false) == .query)
        #expect(TokenInjection.site(placement: .header, method: "GET", isForm: false) == .header)
    }

    @Test func clientTokenDetection() {
        #expect(TokenInjection.clientHasToken(pathAndQuery: "/x?f=json&token=abc", headers: HTTPHeaders()))
        #expect(!TokenInjection.clientHasToken(pathAndQuery: "/x?f=json&tokens=abc&mytoken=1", headers: HTTPHeaders()))
        #expect(
            TokenInjection.clientHasToken(pathAndQuery: "/x", headers: HTTPHeaders([("authorization", "Bearer q")])))
        #expect(
            !TokenInjection.clientHasToken(pathAndQuery: "/x", headers: HTTPHeaders([("Authorization", "Basic q")])))
        #expect(
            TokenInjection.clientHasToken(pathAndQuery: "/x", headers: HTTPHeaders(), form: Array("a=1&token=z".utf8)))
        #expect(
            TokenInjection.clientHasToken(
                pathAndQuery: "/x", headers: HTTPHeaders([("X-Esri-Authorization", "Bearer t ")])))
        #expect(
            TokenInjection.clientHasToken(pathAndQuery: "/x", headers: HTTPHeaders([("X-Esri-Authorization", "t")])))
    }

    /// An empty value is no token: the Services Directory's forms submit `token=`, and `Bearer ` alone carries
    /// nothing. The proxy's token goes in, and the empty one goes out (never two `token` parameters).
    @Test func emptyClientTokensAreNoTokens() {
        let none = HTTPHeaders()
        #expect(
            !TokenInjection.clientHasToken(
                pathAndQuery: "/q?where=1%3D1&text=&token=&outFields=*&f=json", headers: none))
        #expect(!TokenInjection.clientHasToken(pathAndQuery: "/q?f=json&token", headers: none))
        #expect(!TokenInjection.clientHasToken(pathAndQuery: "/q?token=&Token=", headers: none))
        #expect(TokenInjection.clientHasToken(pathAndQuery: "/q?token=&Token=x", headers: none))
        #expect(!TokenInjection.clientHasToken(pathAndQuery: "/q", headers: none, form: Array("f=json&token=".utf8)))
        for v in ["Bearer ", "Bearer", "bearer \t", ""] {
            #expect(
                !TokenInjection.clientHasToken(pathAndQuery: "/q", headers: HTTPHeaders([("X-Esri-Authorization", v)])),
                "\(v)")
            #expect(
                !TokenInjection.clientHasToken(pathAndQuery: "/q", headers: HTTPHeaders([("Authorization", v)])), "\(v)"
            )
        }
        #expect(TokenInjection.headerCredential("Bearerx") == .other)
        #expect(TokenInjection.headerCredential("Basic dTpw") == .other)

        let q = TokenInjection.apply(
            token: "t", site: .query, pathAndQuery: "/q?where=1%3D1&text=&token=&outFields=*&f=json",
            headers: HTTPHeaders([("X-Esri-Authorization", "Bearer"), ("Authorization", "Bearer")]), form: nil)
        #expect(q.pathAndQuery == "/q?where=1%3D1&text=&outFields=*&f=json&token=t")
        #expect(!q.headers.contains("x-esri-authorization") && !q.headers.contains("authorization"))
        let f = TokenInjection.apply(
            token: "t", site: .form, pathAndQuery: "/q", headers: none,
            form: Array("token=&f=json".utf8))
        #expect(String(decoding: f.form!, as: UTF8.self) == "f=json&token=t")
        // Web-tier credentials stay.
        let b = TokenInjection.apply(
            token: "t", site: .query, pathAndQuery: "/q", headers: HTTPHeaders([("Authorization", "Basic dTpw")]),
            form: nil)
        #expect(b.headers.values("authorization") == ["Basic dTpw"])
    }
}

@Suite struct CredentialStoreTests {
    private func cred(_ name: String, _ match: [String]) -> Credential {
        Credential(
            name: name, kind: .apiKey(APIKeySettings(slots: [.init(number: 1, key: name)])),
            match: match.compactMap(MatchPrefix.parse), placement: .param,
            overrideClientToken: false, line: 1)
    }

    @Test func longestPrefixWinsTiesFirst() {
        let store = CredentialStore([
            cred("broad", ["https://gis.example.com"]),
            cred("arcgis", ["https://gis.example.com/arcgis"]),
            cred("arcgis-dup", ["https://gis.example.com/arcgis"]),
            cred("wild", ["https://*.example.com/arcgis/rest"]),
        ])
        func pick(_ url: String) -> String? {
            guard case .absolute(let t)? = try? RequestHeadParser.parseTarget(method: "GET", url) else { return nil }
            return store.tokenCredential(for: t)?.name
        }
        // The longer path prefix wins even over an exact host (then exact beats wildcard, then host length).
        #expect(pick("https://gis.example.com/arcgis/rest/services") == "wild")
        #expect(pick("https://gis.example.com/arcgis/admin") == "arcgis")
        #expect(pick("https://gis.example.com/portal/home") == "broad")
        #expect(pick("https://other.example.com/arcgis/rest/info") == "wild")
        #expect(pick("https://other.example.com/arcgis/x") == nil)
        #expect(pick("http://gis.example.com/arcgis/rest") == nil)
        #expect(pick("https://gis.example.com:8443/arcgis") == nil)
        #expect(pick("https://gis.example.com/arcgisdata") == "broad")
    }
}

@Suite struct CredentialConfigTests {
    let loader = ConfigLoader(environment: ["KEY": "secret-api-key"])

    @Test func parsesEveryType() throws {
        let c = try loader.parse(
            """
            [[credential]]
            name = "key"
            type = "api-key"
            key = "${KEY}"
            match = "https://services.arcgis.com"
            [[credential]]
            name = "pre"
            type = "token"
            token = "abc"
            referer = "https://app.example.com"
            expires = 2030-01-01T00:00:00Z
            match = ["https://gis.example.com/arcgis"]
            token_placement = "header"
            override_client_token = true
            [[credential]]
            name = "gen"
            type = "arcgis-token"
            username = "u"
            password = "p"
            match = "https://gis2.example.com/arcgis"
            [[credential]]
            name = "app"
            type = "oauth-app"
            client_id = "id"
            client_secret = "s"
            portal_url = "https://www.arcgis.com/"
            match = "https://www.arcgis.com/sharing"
            [[credential]]
            name = "user"
            type = "oauth-user"
            client_id = "id"
            portal_url = "https://host/portal"
            redirect_uri = "urn:ietf:wg:oauth:2.0:oob"
            match = "https://host/portal"
            """)
        #expect(c.credentials.map(\.kind.typeName) == ["api-key", "token", "arcgis-token", "oauth-app", "oauth-user"])
        #expect(c.credentials[0].kind == .apiKey(APIKeySettings(slots: [.init(number: 1, key: "secret-api-key")])))
        #expect(
            c.credentials[1].kind
                == .token(token: "abc", referer: "https://app.example.com", expires: 1_893_456_000_000))
        #expect(c.credentials[1].placement == .header)
        #expect(c.credentials[1].overrideClientToken)
        guard let a = c.credentials[2].kind as? ArcGISTokenSettings, let o = c.credentials[3].kind as? OAuthAppSettings
        else {
            Issue.record("kinds")
            return
        }
        // No referer configured: bound to the credential's synthetic referer, never to the egress address.
        #expect(a.client == "referer")
        #expect(a.referer == "app://authproxy/gen" && a.syntheticReferer)
        #expect(o.portalURL == "https://www.arcgis.com")
    }

    @Test(arguments: [
        ("[[credential]]\nname = \"a\"\ntype = \"api-key\"\nmatch = \"https://h\"\n", "credential[0].key", "needs key"),
        (
            "[[credential]]\nname = \"a\"\ntype = \"api-key\"\nkey = \"k\"\nkee = 1\nmatch = \"https://h\"\n",
            "credential[0].kee", "unknown key"
        ),
        (
            "[[credential]]\nname = \"a\"\ntype = \"magic\"\nmatch = \"https://h\"\n", "credential[0].type",
            "not supported"
        ),
        (
            "[[credential]]\nname = \"a\"\ntype = \"token\"\ntoken = \"t\"\nexpires = \"tomorrow\"\nmatch = \"https://h\"\n",
            "credential[0].expires", "RFC 3339"
        ),
        (
            "[[credential]]\nname = \"a\"\ntype = \"oauth-app\"\nclient_id = \"i\"\nclient_secret = \"s\"\nportal_url = \"ftp://x\"\nmatch = \"https://h\"\n",
            "credential[0].portal_url", "not an http(s) URL"
        ),
        (
            "[[credential]]\nname = \"a\"\ntype = \"api-key\"\nkey = \"k\"\nmatch = \"https://h\"\n[[credential]]\nname = \"a\"\ntype = \"api-key\"\nkey = \"k\"\nmatch = \"https://h\"\n",
            "credential[1].name", "duplicate"
        ),
    ])
    func rejects(_ text: String, _ key: String, _ fragment: String) {
        do {
            _ = try loader.parse(text)
            Issue.record("accepted")
        } catch {
            #expect(error.key == key, "\(error)")
            #expect(error.description.contains(fragment), "\(error)")
            #expect(!error.description.contains("secret-api-key"))
        }
    }

    @Test func rfc3339() {
        #expect(parseRFC3339("1970-01-01T00:00:00Z") == 0)
        #expect(parseRFC3339("1970-01-01T01:00:00+01:00") == 0)
        #expect(parseRFC3339("1970-01-01T00:00:01.5Z") == 1500)
        #expect(parseRFC3339("1970-01-01T00:00:01.123456Z") == 1123)
        #expect(parseRFC3339("1970-01-01 00:00:00") == nil)
    }
}

@Suite struct TokenRejectionAdditionsTests {
    private func check(_ status: Int, _ ct: String?, _ body: String, encoding: String? = nil) -> Bool {
        TokenRejection.isRejection(status: status, contentType: ct, contentEncoding: encoding, body: Array(body.utf8))
    }

    @Test(arguments: [
        #"{"code":499,"message":"Token Required","messageCode":"GWM_0003","details":[]}"#,
        #"{ "code" : 498, "message" : "Invalid token.", "details" : [ ] }"#,
        #"cb({"code":499,"message":"Token Required"});"#,
        // GWM_0003 is "token required" without a code or with any code but 403 (arcgis-rest-js does the same).
        #"{"error":{"code":400,"message":"Token Required","messageCode":"GWM_0003","details":[]}}"#,
        #"{"messageCode":"GWM_0003","message":"Token Required"}"#,
        #"{"error":{"messageCode":"GWM_0003","message":"Token Required"}}"#,
        // The code after other members of the error object.
        #"{"error":{"message":"x","details":[{"code":1}],"code":499}}"#,
    ])
    func detectsNewForms(_ body: String) {
        #expect(check(200, "application/json", body), "\(body)")
    }

    @Test(arguments: [
        // Data that has a top-level code among other members is not an error object.
        #"{"code":498,"features":[]}"#,
        #"{"count":3,"code":499}"#,
        #"{"code":400,"message":"Unable to complete operation.","details":[]}"#,
        #"{"error":{"code":500,"messageCode":"GWM_0001"}}"#,
        #"{"messageCode":"GWM_0005","message":"Method not supported.","code":405}"#,
    ])
    func ignoresLookalikes(_ body: String) {
        #expect(!check(200, "application/json", body), "\(body)")
    }

    @Test func http403WithGWM0003IsStillNoPermission() {
        #expect(!check(403, "application/json", #"{"error":{"code":403,"messageCode":"GWM_0003"}}"#))
    }

    /// ArcGIS answers "no permission" with HTTP 200 and an error object of code 403 and messageCode GWM_0003:
    /// not retryable, so not a token error, whatever the messageCode.
    @Test(arguments: [
        #"{"error":{"code":403,"message":"You do not have permissions to access this resource or perform this operation.","messageCode":"GWM_0003","details":[]}}"#,
        #"{"error":{"messageCode":"GWM_0003","code":403}}"#,
        #"{"code":403,"messageCode":"GWM_0003","message":"You do not have permissions"}"#,
        #"cb({"error":{"code":403,"messageCode":"GWM_0003"}});"#,
        #"{"error":{"code":403,"messageCode":"GWM_0007"}}"#,
    ])
    func bodyCode403IsNoPermission(_ body: String) {
        #expect(!check(200, "application/json", body), "\(body)")
        #expect(TokenRejection.ErrorFields(code: 403, messageCode: "GWM_0003").isTokenError == false)
        #expect(TokenRejection.ErrorFields(code: nil, messageCode: "GWM_0003").isTokenError)
        #expect(TokenRejection.ErrorFields(code: 499, messageCode: "GWM_0003").isTokenError)
    }

    @Test(arguments: [BoundedInflate.Encoding.gzip, .deflate])
    func compressedBodies(_ encoding: BoundedInflate.Encoding) throws {
        let name = encoding == .gzip ? "gzip" : "deflate"
        let rejection = try compress(#"{"error":{"code":498,"message":"Invalid token.","details":[]}}"#, encoding)
        #expect(
            TokenRejection.isRejection(
                status: 200, contentType: "application/json", contentEncoding: name, body: rejection))
        let data = try compress(#"{"features":[{"attributes":{"code":498}}]}"#, encoding)
        #expect(
            !TokenRejection.isRejection(status: 200, contentType: "application/json", contentEncoding: name, body: data)
        )
        // The compressed bytes themselves are not sniffed as text without the header.
        #expect(!TokenRejection.isRejection(status: 200, contentType: "application/json", body: rejection))
        // An encoding that cannot be decoded is never a rejection by body.
        #expect(
            !TokenRejection.isRejection(
                status: 200, contentType: "application/json", contentEncoding: "br", body: rejection))
        #expect(
            TokenRejection.isRejection(
                status: 498, contentType: "application/json", contentEncoding: "br", body: rejection))
    }

    @Test func rawDeflateAndHTML() throws {
        let raw = try compress("<html><h2>Error: Invalid Token</h2></html>", .deflate, raw: true)
        #expect(
            TokenRejection.isRejection(status: 200, contentType: "text/html", contentEncoding: "deflate", body: raw))
    }

    @Test func decodingIsBounded() throws {
        // 1 MiB of spaces compresses to ~1 KiB; only the look-ahead is decoded, and the error after it is not seen.
        let big = try compress(String(repeating: " ", count: 1 << 20) + #"{"error":{"code":498}}"#, .gzip)
        #expect(big.count < 8 * 1024)
        let out = try #require(BoundedInflate.decode(big, encoding: .gzip, limit: TokenRejection.lookAhead))
        #expect(out.count == TokenRejection.lookAhead)
        #expect(
            !TokenRejection.isRejection(
                status: 200, contentType: "application/json", contentEncoding: "gzip", body: big))
        // A body cut short (the sniff buffer holds the first bytes only) decodes as far as it goes.
        let whole = try compress(#"{"error":{"code":499,"message":"Token Required","details":[]}}"#, .gzip)
        let part = Array(whole.prefix(whole.count - 8))  // without the gzip trailer
        #expect(
            TokenRejection.isRejection(
                status: 200, contentType: "application/json", contentEncoding: "gzip", body: part))
        #expect(BoundedInflate.decode(Array("not compressed".utf8), encoding: .gzip, limit: 100) == nil)
    }
}

/// Compresses a fixture with zlib (gzip, zlib-wrapped deflate, or raw deflate).
private func compress(_ text: String, _ encoding: BoundedInflate.Encoding, raw: Bool = false) throws -> [UInt8] {
    let wbits: Int32 = encoding == .gzip ? 31 : (raw ? -15 : 15)
    var stream = z_stream()
    try #require(ap_deflate_init2(&stream, 6, wbits) == Z_OK)
    defer { deflateEnd(&stream) }
    var input = Array(text.utf8)
    var out = [UInt8](repeating: 0, count: input.count + 1024)
    let status = input.withUnsafeMutableBufferPointer { inp in
        out.withUnsafeMutableBufferPointer { outp in
            stream.next_in = inp.baseAddress
            stream.avail_in = UInt32(inp.count)
            stream.next_out = outp.baseAddress
            stream.avail_out = UInt32(outp.count)
            return deflate(&stream, Z_FINISH)
        }
    }
    try #require(status == Z_STREAM_END)
    return Array(out[0..<Int(stream.total_out)])
}

/// `Accept-Encoding` fields with these values (one field per value), beside another field.
private func acceptEncoding(_ values: [String]) -> HTTPHeaders {
    HTTPHeaders([("Host", "gis")] + values.map { ("Accept-Encoding", $0) })
}

/// What a request whose answer is inspected offers upstream: only codings the rejection sniffer decodes.
@Suite struct AcceptEncodingForInspectionTests {
    @Test(arguments: [
        (["gzip, deflate, br, zstd"], "gzip, deflate"),
        (["br;q=1.0, gzip;q=0.8, *;q=0.1"], "gzip;q=0.8"),
        (["gzip", "BR", "x-gzip ; q=0.5"], "gzip, x-gzip ; q=0.5"),
        (["br"], "identity"),
        (["zstd, *"], "identity"),
        (["identity, br"], "identity"),
        // What is left must accept something.
        (["br, identity;q=0"], "identity"),
        (["br, gzip;q=0, identity;q=0.0"], "identity"),
        (["br, gzip;q=0.5, identity;q=0"], "gzip;q=0.5, identity;q=0"),
    ])
    func undecodableCodingsAreDropped(_ values: [String], _ sent: String) {
        #expect(TokenRejection.acceptEncodingForInspection(acceptEncoding(values)) == sent, "\(values)")
        // The allocation-free check agrees: something is to be dropped.
        #expect(!TokenRejection.namesOnlyDecodable(acceptEncoding(values)))
    }

    @Test(arguments: [
        [], ["gzip, deflate"], ["GZIP;q=1.0 , Deflate", "identity"], ["x-gzip", ""], ["gzip;q=0, identity"],
    ])
    func decodableOnlyIsLeftAlone(_ values: [String]) {
        #expect(TokenRejection.namesOnlyDecodable(acceptEncoding(values)))
        #expect(TokenRejection.acceptEncodingForInspection(acceptEncoding(values)) == nil)
    }

    @Test(arguments: [[String](), ["gzip, deflate"], ["identity"], ["gzip;q=1, deflate;q=0.5"], [""]])
    func decodableOrAbsentIsLeftAsIs(_ values: [String]) {
        #expect(TokenRejection.acceptEncodingForInspection(acceptEncoding(values)) == nil, "\(values)")
    }

    @Test func everyCodingKeptIsOneTheSnifferReads() throws {
        let sent = try #require(
            TokenRejection.acceptEncodingForInspection(acceptEncoding(["gzip, deflate, br, zstd, x-gzip, compress"])))
        for coding in sent.split(separator: ",") {
            let name = String(coding.split(separator: ";")[0]).trimmingCharacters(in: .whitespaces)
            #expect(BoundedInflate.Encoding(contentEncoding: name) != nil || name == "identity", "\(name)")
        }
    }
}
