import Testing

@testable import AuthProxyCore

private func parse(_ toml: String, env: [String: String] = [:]) throws(ConfigError) -> QueryKind {
    var reader = TableReader(try! TOMLParser.parse(toml), path: "credential[0]", env: env)
    let kind = try QueryKind.parse(&reader, name: "geoserver")
    try reader.finish()
    return kind
}

private func parseError(_ toml: String, env: [String: String] = [:]) -> ConfigError? {
    do throws(ConfigError) {
        _ = try parse(toml, env: env)
        return nil
    } catch {
        return error
    }
}

private func outgoing(
    _ method: String, _ pathAndQuery: String, body: String? = nil, contentType: String? = nil
) -> OutgoingRequest {
    var fields = HTTPHeaders()
    if let contentType { fields.add(name: "Content-Type", value: contentType) }
    return OutgoingRequest(
        method: method, target: URLTarget(scheme: "http", host: "gs", port: 8080, pathAndQuery: pathAndQuery),
        fields: fields, body: body.map { Array($0.utf8) }, bodyLength: body.map { Int64($0.utf8.count) },
        isUpgrade: false, now: 0, credential: "geoserver")
}

@Suite struct QueryKindTests {
    @Test func parametersComeFromTheEnvironmentFilesOrLiterals() throws {
        let kind = try parse(
            #"params = { authkey = "${GS_KEY}", layer_hint = "literal" }"#, env: ["GS_KEY": "0a1b-2c3d"])
        #expect(kind.parameters.parameters.map(\.name) == ["authkey", "layer_hint"])
        #expect(kind.secrets(token: nil) == ["0a1b-2c3d", "literal"])
        #expect(kind.scrubsResponseBodiesByDefault)
        #expect(kind.role == .token)
        #expect(kind.tokenSource == .none)
        #expect(kind.statusDetails.map(\.1) == ["authkey, layer_hint"])
        #expect(!kind.statusDetails.map(\.1).joined().contains("0a1b"))
        #expect(kind.identityMaterial.contains("0a1b-2c3d"))
    }

    @Test func badConfigurationsNameTheKeyAndLineNeverTheValue() {
        let missing = parseError(#"paramz = { authkey = "SECRETVALUE" }"#)
        #expect(missing?.key == "credential[0].paramz")
        let empty = parseError("params = {}\n")
        #expect(empty?.key == "credential[0].params")
        #expect(empty?.line == 1)
        let blankName = parseError("\n" + #"params = { "" = "SECRETVALUE" }"#)
        #expect(blankName?.key == "credential[0].params.")
        #expect(blankName?.line == 2)
        let badName = parseError(#"params = { "auth key" = "SECRETVALUE" }"#)
        #expect(badName?.key == "credential[0].params.auth key")
        let control = parseError(#"params = { authkey = "SECRET\nVALUE" }"#)
        #expect(control?.key == "credential[0].params.authkey")
        let blank = parseError(#"params = { authkey = "${GS_KEY}" }"#, env: ["GS_KEY": ""])
        #expect(blank?.key == "credential[0].params.authkey")
        let twice = parseError(#"params = { authkey = "SECRETVALUE", AUTHKEY = "SECRETVALUE" }"#)
        #expect(twice?.key == "credential[0].params.AUTHKEY")
        let notString = parseError("params = { authkey = 42 }")
        #expect(notString?.key == "credential[0].params.authkey")
        let unset = parseError(#"params = { authkey = "${NOT_SET}" }"#)
        #expect(unset?.message.contains("NOT_SET") == true)
        for e in [missing, empty, blankName, badName, control, blank, twice, notString, unset] {
            let text = e.map { String(describing: $0) } ?? ""
            #expect(!text.isEmpty)
            #expect(!text.contains("SECRET"))
        }
    }

    @Test func theParameterReplacesTheClientsHoweverSpelled() throws {
        let kind = try parse(#"params = { authkey = "k/1 2" }"#)
        func applied(_ pq: String) -> String {
            var r = outgoing("GET", pq)
            #expect(kind.apply(nil, to: &r) == nil)
            return r.target.pathAndQuery
        }
        #expect(applied("/geoserver/wms") == "/geoserver/wms?authkey=k%2F1%202")
        #expect(applied("/geoserver/wms?") == "/geoserver/wms?authkey=k%2F1%202")
        #expect(
            applied("/geoserver/wms?SERVICE=WMS&authkey=mine&REQUEST=GetCapabilities")
                == "/geoserver/wms?SERVICE=WMS&REQUEST=GetCapabilities&authkey=k%2F1%202")
        #expect(applied("/ows?%61uthkey=mine&AUTHKEY=x&authkey&a=1") == "/ows?a=1&authkey=k%2F1%202")
        #expect(applied("/ows?authkeys=1&myauthkey=2") == "/ows?authkeys=1&myauthkey=2&authkey=k%2F1%202")
    }

    @Test func severalParametersAllGoIn() throws {
        let kind = try parse(#"params = { key = "abc", app = "maps" }"#)
        var r = outgoing("GET", "/tiles/3/4/5.png?key=client")
        _ = kind.apply(nil, to: &r)
        #expect(r.target.pathAndQuery == "/tiles/3/4/5.png?key=abc&app=maps")
    }

    @Test func aFormLosesTheClientsFieldAndTheParameterGoesInTheQuery() throws {
        let kind = try parse(#"params = { authkey = "K" }"#)
        let form = "application/x-www-form-urlencoded; charset=UTF-8"
        var r = outgoing(
            "POST", "/geoserver/wfs", body: "service=WFS&authkey=mine&request=GetFeature", contentType: form)
        #expect(
            kind.prepare(
                RequestView(method: "POST", target: r.target, fields: r.fields, bodyLength: 10, isUpgrade: false)
            ).holdsBodyUpTo != nil)
        _ = kind.apply(nil, to: &r)
        #expect(r.target.pathAndQuery == "/geoserver/wfs?authkey=K")
        #expect(r.body.map { String(decoding: $0, as: UTF8.self) } == "service=WFS&request=GetFeature")
        #expect(r.bodyLength == 30)
        // A form without the field is sent byte for byte.
        var untouched = outgoing("POST", "/geoserver/wfs", body: "a=1&&b=2", contentType: form)
        _ = kind.apply(nil, to: &untouched)
        #expect(untouched.body == Array("a=1&&b=2".utf8))
        // Not a form: the body is not held, nor looked at.
        let xml = RequestView(
            method: "POST", target: r.target, fields: HTTPHeaders([("Content-Type", "text/xml")]), bodyLength: 10,
            isUpgrade: false)
        #expect(kind.prepare(xml).holdsBodyUpTo == nil)
        var post = outgoing("POST", "/geoserver/wfs", body: "<GetFeature authkey=\"x\"/>", contentType: "text/xml")
        _ = kind.apply(nil, to: &post)
        #expect(post.body == Array("<GetFeature authkey=\"x\"/>".utf8))
        #expect(post.target.pathAndQuery == "/geoserver/wfs?authkey=K")
    }
}
