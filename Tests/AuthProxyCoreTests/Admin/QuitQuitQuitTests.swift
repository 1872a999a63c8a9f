import Testing

@testable import AuthProxyCore

/// `POST /quitquitquit`: opt-in, and under the same Host and cross-site rules as `POST /reload`.
@Suite struct QuitQuitQuitTests {
    final class Backend: AdminBackend, @unchecked Sendable {
        let enabled: Bool
        var triggers: [String] = []
        init(enabled: Bool) { self.enabled = enabled }
        func readiness() -> Readiness { Readiness(ready: true, reasons: []) }
        func statusReport() -> StatusReport { fatalError("not used") }
        func statusJSON() -> String { "{}" }
        func metricsExposition() -> [UInt8] { [] }
        func reload(trigger: String) -> (applied: Bool, message: String) { (true, "applied") }
        func pacInputs() -> (settings: PacEndpoint.Settings, listeners: [ListenAddress]) {
            (PacEndpoint.Settings(rules: [], configuredAddress: nil, fallback: .none), [])
        }
        var quitquitquitEnabled: Bool { enabled }
        func requestShutdown(trigger: String) { triggers.append(trigger) }
    }

    static func post(
        host: String? = "127.0.0.1:9128", origin: String? = nil, site: String? = nil,
        headers: [String] = ["X-Authproxy-Quit"]
    ) -> AdminRequest {
        AdminRequest(
            method: "POST", target: "/quitquitquit", host: host, origin: origin, secFetchSite: site,
            headerNames: headers)
    }

    @Test func offByDefaultIsNotFound() {
        let b = Backend(enabled: false)
        #expect(AdminRouter.route(Self.post(), hosts: [], backend: b).status == 404)
        #expect(b.triggers.isEmpty)
    }

    @Test func enabledStartsTheShutdownOnce() {
        let b = Backend(enabled: true)
        let r = AdminRouter.route(Self.post(), hosts: [], backend: b)
        #expect(r.status == 200)
        #expect(b.triggers == ["POST /quitquitquit"])
    }

    @Test func crossSiteAndRebindingAreRefused() {
        let b = Backend(enabled: true)
        #expect(AdminRouter.route(Self.post(origin: "http://evil.example"), hosts: [], backend: b).status == 403)
        #expect(AdminRouter.route(Self.post(origin: "null"), hosts: [], backend: b).status == 403)
        #expect(AdminRouter.route(Self.post(site: "cross-site"), hosts: [], backend: b).status == 403)
        let form = AdminRouter.route(Self.post(headers: []), hosts: [], backend: b)
        #expect(form.status == 403 && String(decoding: form.body, as: UTF8.self).contains("X-Authproxy-Quit"))
        #expect(AdminRouter.route(Self.post(host: "evil.example"), hosts: [], backend: b).status == 421)
        var get = Self.post()
        get.method = "GET"
        #expect(AdminRouter.route(get, hosts: [], backend: b).status == 405)
        #expect(b.triggers.isEmpty)
        #expect(AdminRouter.route(Self.post(origin: "http://127.0.0.1:9128"), hosts: [], backend: b).status == 200)
    }
}
