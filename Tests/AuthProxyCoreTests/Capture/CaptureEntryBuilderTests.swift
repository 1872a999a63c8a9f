import Foundation
import Synchronization
import Testing

@testable import AuthProxyCore

/// The capture's entries are built redacted: every input below carries secrets, and no output may.
@Suite struct CaptureEntryBuilderTests {
    static let token = "TOK-abc/123+xyz="
    static let key = "KEY-9f8e7d"
    static let marker = "[redacted:credential gis]"

    func json(_ v: some Encodable) throws -> String {
        String(decoding: try JSONEncoder().encode(v), as: UTF8.self)
    }

    func client(_ url: String, headers: [(String, String)] = [], form: String? = nil)
        -> CaptureEntryBuilder.RequestParts
    {
        CaptureEntryBuilder.RequestParts(
            method: form == nil ? "GET" : "POST", url: url, headers: headers.map { (name: $0.0, value: $0.1) },
            form: form.map { Array($0.utf8) }, bodyLength: form.map { Int64($0.utf8.count) })
    }

    @Test func theTokenTheProxyAddedToTheQueryIsTheCredentialsMarker() throws {
        let c = client("https://gis.example/arcgis/rest/services/x/query?where=1%3D1&f=json")
        var sent = c
        sent.url += "&token=" + TokenInjection.percentEncoded(Self.token)
        let r = CaptureEntryBuilder.upstreamRequest(sent, client: c, credential: "gis")
        #expect(r.queryString.first { $0.name == "token" }?.value == Self.marker)
        #expect(r.queryString.first { $0.name == "where" }?.value == "1=1")
        #expect(r.url.hasSuffix("&token=%5Bredacted%3Acredential%20gis%5D"))
        let text = try json(r)
        #expect(!text.contains("TOK-abc"))
    }

    @Test func aParameterTheClientSentIsKeptUnlessItsNameIsASecret() {
        let c = client("http://h/p?token=CLIENTTOKEN&apikey=K2&layer=3")
        let r = CaptureEntryBuilder.clientRequest(c)
        #expect(r.queryString.map(\.value) == ["[redacted]", "[redacted]", "3"])
        #expect(!r.url.contains("CLIENTTOKEN") && !r.url.contains("K2"))
        // Passed through upstream unchanged: still the client's secret, not the credential's.
        let u = CaptureEntryBuilder.upstreamRequest(c, client: c, credential: "gis")
        #expect(u.queryString.map(\.value) == ["[redacted]", "[redacted]", "3"])
    }

    @Test func headersTheProxySetAreMarkedAndTheClientsSecretsReplaced() throws {
        let c = client(
            "http://h/p",
            headers: [
                ("Authorization", "Basic c2VjcmV0"), ("Cookie", "a=1; sid=SESSIONSECRET"), ("Accept", "*/*"),
                ("Proxy-Authorization", "Basic cHJveHk="),
            ])
        var sent = c
        sent.headers = [
            (name: "Accept", value: "*/*"), (name: "X-Esri-Authorization", value: "Bearer " + Self.token),
            (name: "X-Api-Key", value: Self.key), (name: "X-Custom-Key-Header", value: Self.key),
            (name: "Via", value: "1.1 authproxy"), (name: "Cookie", value: "a=1; sid=SESSIONSECRET"),
        ]
        let u = CaptureEntryBuilder.upstreamRequest(sent, client: c, credential: "gis")
        let values = Dictionary(uniqueKeysWithValues: u.headers.map { ($0.name, $0.value) })
        #expect(values["Accept"] == "*/*")
        #expect(values["Via"] == "1.1 authproxy")
        #expect(values["X-Esri-Authorization"] == Self.marker)
        #expect(values["X-Api-Key"] == Self.marker)
        #expect(values["X-Custom-Key-Header"] == Self.marker)
        #expect(values["Cookie"] == "[redacted]")
        #expect(u.cookies.map(\.name) == ["a", "sid"] && u.cookies.allSatisfy { $0.value == "[redacted]" })
        let cr = CaptureEntryBuilder.clientRequest(c)
        let all = try json(u) + json(cr)
        for secret in [Self.token, Self.key, "SESSIONSECRET", "c2VjcmV0", "cHJveHk="] { #expect(!all.contains(secret)) }
    }

    @Test func aFormGetsTheSameTreatmentAsAQuery() throws {
        let c = client(
            "http://h/query", headers: [("Content-Type", "application/x-www-form-urlencoded")],
            form: "where=1%3D1&f=json")
        var sent = c
        sent.form = Array("where=1%3D1&f=json&token=\(TokenInjection.percentEncoded(Self.token))".utf8)
        let u = CaptureEntryBuilder.upstreamRequest(sent, client: c, credential: "gis")
        #expect(u.postData?.params?.first { $0.name == "token" }?.value == Self.marker)
        #expect(u.postData?.params?.first { $0.name == "where" }?.value == "1=1")
        let sentText = try json(u)
        #expect(!sentText.contains("TOK-abc"))
        // A GET the proxy sent as a form: the pairs that were the client's query are the client's.
        let get = client("http://h/query?where=1%3D1&f=json")
        var form = get
        form.method = "POST"
        form.url = "http://h/query"
        form.form = Array("where=1%3D1&f=json&token=\(TokenInjection.percentEncoded(Self.token))".utf8)
        let g = CaptureEntryBuilder.upstreamRequest(form, client: get, credential: "gis")
        #expect(g.postData?.params?.map(\.value) == ["1=1", "json", Self.marker])
    }

    @Test func aStreamedBodyIsNotRecordedAndSaysSo() {
        var c = client("http://h/upload", headers: [("Content-Type", "application/octet-stream")])
        c.bodyLength = 5000
        let r = CaptureEntryBuilder.clientRequest(c)
        #expect(r.postData?.text == "" && r.postData?.comment?.contains("not recorded") == true)
        #expect(r.bodySize == 5000)
    }

    @Test func theResponseLosesEveryEchoOfTheInjectedSecrets() throws {
        let body = Array(
            "{\"next\":\"https://h/x?token=\(TokenInjection.percentEncoded(Self.token))\",\"raw\":\"\(Self.token)\"}"
                .utf8)
        var b = CaptureEntryBuilder.Body()
        body.withUnsafeBytes { b.append($0, limit: 1 << 20) }
        let r = CaptureEntryBuilder.response(
            status: 302,
            headers: [
                (name: "Location", value: "https://h/login?token=\(Self.token)"),
                (name: "Set-Cookie", value: "AGS_ROLES=SECRETROLES; Path=/"),
                (name: "Content-Type", value: "application/json"),
            ], body: b, secrets: [Self.token], credential: "gis")
        let text = try json(r)
        #expect(!text.contains("TOK-abc") && !text.contains("SECRETROLES"))
        #expect(r.redirectURL == "https://h/login?token=\(Self.marker)")
        #expect(r.cookies == [HAR.NameValue(name: "AGS_ROLES", value: "[redacted]")])
        #expect(r.content.text?.contains(Self.marker) == true && r.content.size == body.count)
    }

    @Test func aSecretAcrossTheCapIsReplacedBeforeTheCut() throws {
        let cap = CaptureEntryBuilder.bodyCap
        let body = Array(String(repeating: "a", count: cap - 5).utf8) + Array(Self.token.utf8) + Array("tail".utf8)
        var b = CaptureEntryBuilder.Body()
        // What CaptureDraft keeps: the cap plus three times the longest secret.
        body.withUnsafeBytes { b.append($0, limit: cap + 3 * Self.token.utf8.count) }
        let r = CaptureEntryBuilder.response(
            status: 200, headers: [(name: "Content-Type", value: "text/plain")], body: b, secrets: [Self.token],
            credential: "gis")
        let text = try #require(r.content.text)
        #expect(text.utf8.count == cap)
        #expect(!text.contains("TOK-"))
        #expect(r.content.comment == "first \(cap) of \(body.count) bytes recorded")
    }

    @Test func aCompressedBodyIsNotRecorded() {
        var b = CaptureEntryBuilder.Body()
        [UInt8](repeating: 0x1f, count: 30).withUnsafeBytes { b.append($0, limit: 100) }
        let r = CaptureEntryBuilder.response(
            status: 200, headers: [(name: "Content-Encoding", value: "gzip")], body: b, secrets: [Self.token],
            credential: "gis")
        #expect(r.content.text == nil && r.content.comment?.contains("gzip") == true)
    }

    @Test func aTokenRequestKeepsOnlyFieldsThatNameTheGrant() throws {
        let form = TokenInjection.formEncoded([
            ("username", "alice"), ("password", "p@ss word"), ("client", "referer"), ("referer", "https://app"),
            ("expiration", "60"), ("f", "json"), ("serverUrl", "https://gis"), ("token", "PORTALTOKEN"),
            ("client_secret", "CS"), ("something_new", "UNKNOWNVALUE"),
        ])
        let r = CaptureEntryBuilder.tokenServiceRequest(
            method: "POST", url: "https://gis/arcgis/tokens/generateToken?extra=QUERYSECRET&f=json",
            headers: [
                (name: "Accept", value: "application/json"), (name: "Authorization", value: "Basic Q0xJRU5U"),
                (name: "X-Gateway", value: "GATEWAYTOKEN"),
            ], form: Array(form.utf8), credential: "gis")
        let params = Dictionary(uniqueKeysWithValues: (r.postData?.params ?? []).map { ($0.name, $0.value) })
        #expect(params["username"] == "alice" && params["client"] == "referer" && params["serverUrl"] == "https://gis")
        #expect(params["password"] == Self.marker && params["token"] == Self.marker)
        #expect(params["client_secret"] == Self.marker && params["something_new"] == Self.marker)
        #expect(r.queryString.map(\.value) == [Self.marker, "json"])
        let text = try json(r)
        for secret in [
            "p@ss", "p%40ss", "PORTALTOKEN", "CS\"", "UNKNOWNVALUE", "QUERYSECRET", "Q0xJRU5U", "GATEWAYTOKEN",
        ] {
            #expect(!text.contains(secret), "\(secret)")
        }
        #expect(r.headers.first == HAR.NameValue(name: "Accept", value: "application/json"))
    }

    @Test func aTokenAnswerKeepsItsShapeWithoutItsTokens() throws {
        let body = Array(
            "{\"token\":\"T1\",\"expires\":1700000000000,\"ssl\":true,\"nested\":{\"refresh_token\":\"R1\",\"access_token\":\"A1\"},\"list\":[{\"id_token\":\"I1\"}]}"
                .utf8)
        let r = CaptureEntryBuilder.tokenServiceResponse(
            status: 200, headers: [(name: "Content-Type", value: "application/json")], body: body, credential: "gis")
        let text = try #require(r.content.text)
        for secret in ["T1", "R1", "A1", "I1"] { #expect(!text.contains("\"\(secret)\"")) }
        let object = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        #expect(object["token"] as? String == Self.marker)
        #expect(object["expires"] as? Int == 1_700_000_000_000)
        let html = CaptureEntryBuilder.tokenServiceResponse(
            status: 200, headers: [], body: Array("<html>token=T1</html>".utf8), credential: "gis")
        #expect(html.content.text == nil && html.content.comment?.contains("not JSON") == true)
    }
}

/// `POST /capture`'s decisions: the listener's Host and cross-site rules, the opt-in, the parameters.
@Suite struct CaptureRouteTests {
    func request(_ target: String, method: String = "POST", host: String? = "127.0.0.1:9128", origin: String? = nil)
        -> AdminRequest
    {
        AdminRequest(
            method: method, target: target, host: host, origin: origin, headerNames: ["X-Authproxy-Capture"])
    }

    @Test func startsAWindowForAWellFormedRequest() {
        let r = AdminRouter.captureRoute(request("/capture?credential=a%20b&seconds=30"), hosts: [], enabled: true)
        #expect(r == .start(AdminRouter.CaptureAsk(credential: "a b", seconds: 30)))
        let d = AdminRouter.captureRoute(request("/capture?credential=gis"), hosts: [], enabled: true)
        #expect(d == .start(AdminRouter.CaptureAsk(credential: "gis", seconds: 60)))
        #expect(AdminRouter.captureRoute(request("/reload"), hosts: [], enabled: true) == nil)
    }

    func status(_ r: AdminRouter.CaptureRouting?) -> Int? {
        if case .answer(let a)? = r { return a.status }
        return nil
    }

    @Test func refusesWhatTheAdminRulesRefuse() {
        #expect(
            status(
                AdminRouter.captureRoute(
                    request("/capture?credential=a", host: "evil.example"), hosts: [], enabled: true)) == 421)
        #expect(
            status(
                AdminRouter.captureRoute(
                    request("/capture?credential=a", origin: "http://evil.example"), hosts: [], enabled: true)) == 403)
        var plain = request("/capture?credential=a")
        plain.headerNames = []
        #expect(status(AdminRouter.captureRoute(plain, hosts: [], enabled: true)) == 403)
        #expect(
            status(AdminRouter.captureRoute(request("/capture?credential=a", method: "GET"), hosts: [], enabled: true))
                == 405)
        #expect(status(AdminRouter.captureRoute(request("/capture?credential=a"), hosts: [], enabled: false)) == 403)
        for bad in [
            "/capture", "/capture?credential=", "/capture?credential=a&seconds=601", "/capture?credential=a&seconds=x",
            "/capture?credential=a&x=1",
        ] {
            #expect(status(AdminRouter.captureRoute(request(bad), hosts: [], enabled: true)) == 400, "\(bad)")
        }
    }

    @Test func theRefusalNamesCaptureNotReload() {
        var plain = request("/capture?credential=a")
        plain.headerNames = []
        guard case .answer(let a)? = AdminRouter.captureRoute(plain, hosts: [], enabled: true) else {
            Issue.record("not refused")
            return
        }
        let text = String(decoding: a.body, as: UTF8.self)
        #expect(text.contains("POST /capture") && text.contains("X-Authproxy-Capture") && !text.contains("reload"))
    }
}

/// The recorder's window: one at a time, the credential filter, the caps.
@Suite struct CaptureRecorderTests {
    /// The document a window ended with.
    final class Got: Sendable {
        let value = Mutex<HAR.Document?>(nil)
    }

    func entry(_ credential: String, text: String = "") -> HAR.Entry {
        HAR.Entry(
            startedDateTime: "2026-11-29T00:00:00.000Z", time: 0,
            request: HAR.Request(
                method: "GET", url: "http://h/", httpVersion: "HTTP/1.1", cookies: [], headers: [], queryString: [],
                bodySize: 0),
            response: CaptureEntryBuilder.noResponse("x"), timings: HAR.Timings(send: 0, wait: 0, receive: 0),
            authproxy: HAR.Annotation(role: "upstream", credential: credential))
    }

    @Test func oneWindowAtATimeRecordingOnlyItsCredential() throws {
        let recorder = CaptureRecorder()
        let got = Got()
        #expect(!recorder.isActive && !recorder.records("gis"))
        let id = try recorder.start(credential: "gis", seconds: 600, nowMillis: 0) { d in got.value.withLock { $0 = d }
        }.get()
        #expect(recorder.isActive && recorder.records("gis") && !recorder.records("other"))
        #expect(
            recorder.start(credential: "other", seconds: 1, nowMillis: 0) { _ in } == .failure(.init(credential: "gis"))
        )
        recorder.record(entry("gis"), startedMillis: 2)
        recorder.record(entry("other"), startedMillis: 1)
        recorder.stop(session: id)
        #expect(!recorder.isActive)
        let doc = try #require(got.value.withLock { $0 })
        #expect(doc.log.entries.map(\.authproxy.credential) == ["gis"])
        recorder.stop(session: id)  // twice: nothing more
    }

    @Test func pastTheCapEntriesAreCountedNotKept() throws {
        let recorder = CaptureRecorder()
        let got = Got()
        let id = try recorder.start(credential: "gis", seconds: 600, nowMillis: 0) { d in got.value.withLock { $0 = d }
        }.get()
        for i in 0..<(CaptureRecorder.maxEntries + 3) { recorder.record(entry("gis"), startedMillis: Int64(i)) }
        recorder.stop(session: id)
        let doc = try #require(got.value.withLock { $0 })
        #expect(doc.log.entries.count == CaptureRecorder.maxEntries)
        #expect(doc.log.comment?.contains("3 entries not recorded") == true)
    }
}
