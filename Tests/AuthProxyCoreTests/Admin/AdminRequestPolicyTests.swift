import Testing

@testable import AuthProxyCore

/// The admin listener's Host check and POST /reload's cross-site checks, without sockets.
@Suite struct AdminRequestPolicyTests {
    /// Records reloads; answers the other routes with fixed text.
    final class Backend: AdminBackend, @unchecked Sendable {
        var reloads = 0
        func readiness() -> Readiness { Readiness(ready: true, reasons: []) }
        func statusReport() -> StatusReport { fatalError("not used") }
        func statusJSON() -> String { "{\"secret\":\"STATUS\"}" }
        func metricsExposition() -> [UInt8] { Array("m 1\n".utf8) }
        func reload(trigger: String) -> (applied: Bool, message: String) {
            reloads += 1
            return (true, "applied")
        }
        func pacInputs() -> (settings: PacEndpoint.Settings, listeners: [ListenAddress]) {
            (
                PacEndpoint.Settings(rules: [], configuredAddress: nil, fallback: .none),
                [ListenAddress(host: "0.0.0.0", port: 3128)]
            )
        }
    }

    static func get(_ host: String?, _ path: String = "/status.json") -> AdminRequest {
        AdminRequest(method: "GET", target: path, host: host)
    }

    @Test(arguments: [
        "127.0.0.1", "127.0.0.1:9090", "10.42.0.7:9128", "[::1]", "[::1]:9090", "[fd00::7]:9128", "localhost",
        "LocalHost:9090", "admin.example", "ADMIN.example:1",
    ])
    func hostsThatNameTheListener(_ host: String) {
        #expect(AdminRequestPolicy.namesListener(host, names: ["admin.example"]), "\(host)")
    }

    @Test(arguments: [
        "attacker.example", "attacker.example:9090", "localhost.attacker.example", "127.0.0.1.nip.io", "localhost.",
        "::1", "[::1", "[127.0.0.1]", "127.1", "2130706433", "", ":9090", "127.0.0.1:99999", "127.0.0.1:x",
        "user@127.0.0.1", "admin.example.evil", "[::1]x",
    ])
    func hostsThatDoNot(_ host: String) {
        #expect(!AdminRequestPolicy.namesListener(host, names: ["admin.example"]), "\(host)")
    }

    @Test func refusedHostGets421NamingTheSettingAndNoContent() {
        let backend = Backend()
        for path in ["/status.json", "/", "/metrics", "/readyz", "/healthz", "/nope"] {
            let r = AdminRouter.route(Self.get("attacker.example:9090", path), hosts: [], backend: backend)
            let body = String(decoding: r.body, as: UTF8.self)
            #expect(r.status == 421 && body.contains("[admin] hosts") && !body.contains("STATUS"), "\(path)")
        }
        let post = AdminRequest(method: "POST", target: "/reload", host: "attacker.example", headerNames: ["X-A"])
        #expect(AdminRouter.route(post, hosts: [], backend: backend).status == 421)
        #expect(backend.reloads == 0)
        #expect(AdminRouter.route(post, hosts: ["attacker.example"], backend: backend).status == 200)
        #expect(backend.reloads == 1)
    }

    @Test func http10WithoutHostIsServed() {
        #expect(AdminRouter.route(Self.get(nil, "/healthz"), hosts: [], backend: Backend()).status == 200)
    }

    @Test func absoluteFormTargetNamesTheAuthority() throws {
        var parser = RequestHeadParser()
        let raw = Array("GET http://attacker.example/status.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
        guard case .complete(let head, _) = raw.withUnsafeBytes({ parser.parse($0) }) else {
            Issue.record("not parsed")
            return
        }
        let r = AdminRequest(head: head)
        #expect(r.host == "attacker.example" && r.target == "/status.json")
        #expect(AdminRouter.route(r, hosts: [], backend: Backend()).status == 421)
    }

    static func reload(
        _ host: String? = "127.0.0.1:9090", origin: String? = nil, referer: String? = nil,
        site: String? = nil, headers: [String] = [], contentType: String? = nil
    ) -> AdminRequest {
        AdminRequest(
            method: "POST", target: "/reload", host: host, origin: origin, referer: referer, secFetchSite: site,
            headerNames: ["Host", "Content-Length"] + headers + (contentType == nil ? [] : ["Content-Type"]),
            contentType: contentType)
    }

    @Test func reloadNeedsANonSimpleRequest() {
        let refused: [AdminRequest] = [
            Self.reload(),
            Self.reload(contentType: "text/plain"),
            Self.reload(contentType: "TEXT/PLAIN ; charset=utf-8"),
            Self.reload(contentType: "application/x-www-form-urlencoded"),
            Self.reload(contentType: "multipart/form-data; boundary=x"),
            Self.reload(headers: ["X-"]),
            Self.reload(headers: ["Accept", "Authorization-X"]),
        ]
        for r in refused {
            let why = AdminRequestPolicy.reloadRefusal(r)
            #expect(why?.contains("X-Authproxy-Reload") == true, "\(r)")
        }
        for r in [
            Self.reload(headers: ["X-Authproxy-Reload"]), Self.reload(headers: ["x-requested-with"]),
            Self.reload(contentType: "application/json"),
        ] {
            #expect(AdminRequestPolicy.reloadRefusal(r) == nil, "\(r)")
        }
    }

    @Test func reloadRefusesCrossSiteMarkers() {
        let x = ["X-Authproxy-Reload"]
        let refused: [(AdminRequest, String)] = [
            (Self.reload(origin: "http://attacker.example", headers: x), "Origin"),
            (Self.reload(origin: "null", headers: x), "Origin: null"),
            (Self.reload(origin: "NULL", headers: x), "Origin: null"),
            (Self.reload(origin: "https://127.0.0.1:9090", headers: x), "Origin"),
            (Self.reload(origin: "http://127.0.0.1:9091", headers: x), "Origin"),
            (Self.reload(origin: "http://127.0.0.1:9090/", headers: x), "Origin"),
            (Self.reload(nil, origin: "http://127.0.0.1", headers: x), "Origin"),
            (Self.reload(referer: "http://attacker.example/x", headers: x), "Referer"),
            (Self.reload(referer: "http://127.0.0.1:9090@attacker.example/", headers: x), "Referer"),
            (Self.reload(site: "cross-site", headers: x), "Sec-Fetch-Site"),
            (Self.reload(site: "same-site", headers: x), "Sec-Fetch-Site"),
        ]
        for (r, word) in refused {
            #expect(AdminRequestPolicy.reloadRefusal(r)?.contains(word) == true, "\(r)")
        }
        let accepted: [AdminRequest] = [
            Self.reload(origin: "http://127.0.0.1:9090", headers: x),
            Self.reload(origin: "HTTP://127.0.0.1:9090", headers: x),
            Self.reload("localhost", origin: "http://LOCALHOST:80", headers: x),
            Self.reload(referer: "http://127.0.0.1:9090/?x#y", headers: x),
            Self.reload(site: "same-origin", headers: x),
            Self.reload(site: "none", headers: x),
        ]
        for r in accepted { #expect(AdminRequestPolicy.reloadRefusal(r) == nil, "\(r)") }
    }

    @Test func refusedReloadIs403AndDoesNotReload() {
        let backend = Backend()
        let r = AdminRouter.route(Self.reload(contentType: "text/plain"), hosts: [], backend: backend)
        #expect(r.status == 403 && backend.reloads == 0)
        #expect(
            AdminRouter.route(Self.reload(headers: ["X-Authproxy-Reload"]), hosts: [], backend: backend).status == 200)
        #expect(backend.reloads == 1)
    }
}
