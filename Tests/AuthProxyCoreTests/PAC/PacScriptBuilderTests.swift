import Testing

@testable import AuthProxyCore

/// The served PAC file, without sockets: which rules the credentials give, how they are written, and the
/// endpoint's answers (address, caching, revalidation). The e2e test evaluates the script with a real PAC engine.
@Suite struct PacScriptBuilderTests {
    static func credentials(_ toml: String) throws -> [Credential] {
        try ConfigLoader(environment: [:]).parse(toml).credentials
    }

    static let sample = """
        [[credential]]
        name = "portal"
        type = "api-key"
        key = "K"
        match = ["https://GIS.example.com/arcgis", "https://gis.example.com/portal", "http://maps.corp:8080/"]

        [[credential]]
        name = "farm"
        type = "password"
        username = "u"
        password = "p"
        match = ["https://*.farm.example.com/", "wss://live.example.com/ws", "http://gisserver/"]
        """

    @Test func rulesComeFromEveryMatchOncePerSchemeHostAndPort() throws {
        let rules = PacScriptBuilder.rules(try Self.credentials(Self.sample))
        typealias R = PacScriptBuilder.Rule
        #expect(
            rules == [
                // The two paths make one host rule.
                R(scheme: "https", host: "gis.example.com", wildcard: false, port: 443),
                R(scheme: "http", host: "maps.corp", wildcard: false, port: 8080),
                R(scheme: "https", host: "farm.example.com", wildcard: true, port: 443),
                R(scheme: "https", host: "live.example.com", wildcard: false, port: 443),  // wss is https's handshake
                R(scheme: "http", host: "gisserver", wildcard: false, port: 80),
            ])
    }

    @Test(arguments: [
        (PacFallback.none, "PROXY proxy.corp:3128"),
        (PacFallback.direct, "PROXY proxy.corp:3128; DIRECT"),
    ])
    func directiveFollowsTheFallback(_ fallback: PacFallback, _ expected: String) {
        #expect(PacScriptBuilder.directive(address: "proxy.corp:3128", fallback: fallback) == expected)
    }

    @Test func scriptListsHostsAndDomainsAndNeverResolvesNames() throws {
        let s = PacScriptBuilder.script(
            rules: PacScriptBuilder.rules(try Self.credentials(Self.sample)),
            address: "proxy.corp:3128", fallback: .direct)
        #expect(s.contains(#"var authproxyDirective = "PROXY proxy.corp:3128; DIRECT";"#))
        #expect(s.contains(#""https://gis.example.com:443": 1,"#))
        #expect(s.contains(#""http://gisserver:80": 1"#))
        #expect(s.contains(#"["https", 443, ".farm.example.com"]"#))
        #expect(s.contains("function FindProxyForURL(url, host)"))
        for blocking in ["dnsResolve", "isInNet", "myIpAddress", "isResolvable"] {
            #expect(!s.contains(blocking), "\(blocking)")
        }
        // No trailing comma before a closing bracket (old engines read `[a,]` as two elements).
        #expect(!s.contains(",\n}") && !s.contains(",\n]"))
    }

    @Test func noCredentialsSendsEverythingDirect() {
        let s = PacScriptBuilder.script(rules: [], address: "p:1", fallback: .none)
        #expect(s.contains("var authproxyHosts = {};"))
        #expect(s.contains("var authproxyDomains = [];"))
    }

    @Test(arguments: [
        ("gis.example.com", #""gis.example.com""#),
        ("PROXY [::1]:3128; DIRECT", #""PROXY [::1]:3128; DIRECT""#),
        (#"a"b\c"#, #""a\u0022b\u005cc""#),
        ("x\n</script>", #""x\u000a\u003c/script\u003e""#),
        ("é", #""\u00e9""#),
        ("🙂", #""\ud83d\ude42""#),
    ])
    func stringsAreEscapedLiterals(_ input: String, _ expected: String) {
        #expect(PacScriptBuilder.jsString(input) == expected)
    }

    @Test func sameInputsGiveTheSameTextAndTag() throws {
        let rules = PacScriptBuilder.rules(try Self.credentials(Self.sample))
        let a = PacScriptBuilder.script(rules: rules, address: "p:1", fallback: .none)
        let b = PacScriptBuilder.script(rules: rules, address: "p:1", fallback: .none)
        #expect(a == b)
        #expect(PacEndpoint.etag(a) == PacEndpoint.etag(b))
        #expect(
            PacEndpoint.etag(a)
                != PacEndpoint.etag(PacScriptBuilder.script(rules: rules, address: "p:2", fallback: .none)))
        #expect(
            PacEndpoint.etag(a)
                != PacEndpoint.etag(PacScriptBuilder.script(rules: rules, address: "p:1", fallback: .direct)))
        #expect(
            PacEndpoint.etag(a)
                != PacEndpoint.etag(
                    PacScriptBuilder.script(rules: Array(rules.dropLast()), address: "p:1", fallback: .none)))
    }
}

@Suite struct PacEndpointTests {
    static let settings = PacEndpoint.Settings(
        rules: [.init(scheme: "https", host: "gis.example.com", wildcard: false, port: 443)], configuredAddress: nil,
        fallback: .none)

    @Test(arguments: [
        ("/proxy.pac", true), ("/wpad.dat", true), ("/proxy.pac?v=2", true), ("/proxy.pacx", false), ("/proxy", false),
        ("/PROXY.PAC", false), ("/x/proxy.pac", false),
    ])
    func targets(_ target: String, _ expected: Bool) {
        #expect(PacEndpoint.isPacTarget(target) == expected)
    }

    @Test(arguments: [
        ("proxy.corp:3128", nil as Int?, "proxy.corp:3128" as String?),
        ("Proxy.Corp:3128", nil, "proxy.corp:3128"),
        ("proxy.corp", 80, "proxy.corp:80"),
        ("proxy.corp", nil, nil),
        ("[::1]:3128", nil, "[::1]:3128"),
        ("10.1.2.3:8080", nil, "10.1.2.3:8080"),
        ("http://proxy.corp:3128", nil, nil),
        ("proxy.corp:3128/x", nil, nil),
        ("user@proxy.corp:3128", nil, nil),
        ("proxy.corp:99999", nil, nil),
        ("a\"b:1", nil, nil),
        ("", 80, nil),
    ])
    func authorities(_ text: String, _ defaultPort: Int?, _ expected: String?) {
        #expect(PacEndpoint.authority(text, defaultPort: defaultPort) == expected)
    }

    @Test func theProxyListenerNamesItselfByPacAddressElseTheHostItWasFetchedWith() {
        var s = Self.settings
        #expect(PacEndpoint.address(settings: s, hostHeader: "Proxy.corp:3128", listener: nil) == "proxy.corp:3128")
        #expect(PacEndpoint.address(settings: s, hostHeader: "proxy.corp", listener: nil) == "proxy.corp:80")
        #expect(
            PacEndpoint.address(settings: s, hostHeader: "bad host", listener: "127.0.0.1:3128") == "127.0.0.1:3128")
        #expect(PacEndpoint.address(settings: s, hostHeader: nil, listener: nil) == nil)
        s.configuredAddress = "gw.corp:8080"
        #expect(PacEndpoint.address(settings: s, hostHeader: "proxy.corp:3128", listener: nil) == "gw.corp:8080")
    }

    @Test func theAdminListenerNamesTheProxyListenerNeverItself() {
        var s = Self.settings
        let wildcard = [ListenAddress(host: "0.0.0.0", port: 3128)]
        let specific = [ListenAddress(host: "::", port: 3129), ListenAddress(host: "10.0.0.5", port: 3128)]
        #expect(
            PacEndpoint.adminAddress(settings: s, listeners: specific, requestHost: "admin.corp:9128")
                == "10.0.0.5:3128")
        #expect(
            PacEndpoint.adminAddress(settings: s, listeners: [ListenAddress(host: "::1", port: 3128)], requestHost: nil)
                == "[::1]:3128")
        // A wildcard listener: the name the admin request used, with the proxy's port (not 9128).
        #expect(
            PacEndpoint.adminAddress(settings: s, listeners: wildcard, requestHost: "gw.corp:9128") == "gw.corp:3128")
        #expect(
            PacEndpoint.adminAddress(settings: s, listeners: wildcard, requestHost: "[fd00::5]:9128")
                == "[fd00::5]:3128")
        #expect(PacEndpoint.adminAddress(settings: s, listeners: wildcard, requestHost: nil) == nil)
        s.configuredAddress = "gw.corp:8080"
        #expect(
            PacEndpoint.adminAddress(settings: s, listeners: specific, requestHost: "admin.corp:9128") == "gw.corp:8080"
        )
    }

    @Test func answersWithTypeCachingAndATagThenNotModified() {
        let a = PacEndpoint.answer(method: "GET", ifNoneMatch: nil, address: "p.corp:3128", settings: Self.settings)
        #expect(a.status == 200)
        #expect(a.contentType == "application/x-ns-proxy-autoconfig")
        #expect(a.body.contains("PROXY p.corp:3128"))
        let tag = PacEndpoint.etag(a.body)
        #expect(a.headers.map(\.0) == ["Cache-Control", "ETag", "X-Content-Type-Options"])
        #expect(a.headers[2].1 == "nosniff")
        #expect(a.headers[0].1 == "max-age=300")
        #expect(a.headers[1].1 == tag)
        #expect(tag.hasPrefix("\"") && tag.hasSuffix("\"") && tag.count == 34)
        for inm in [tag, "W/\(tag)", "\"other\", \(tag)", "*"] {
            let b = PacEndpoint.answer(method: "GET", ifNoneMatch: inm, address: "p.corp:3128", settings: Self.settings)
            #expect(b.status == 304, "\(inm)")
            #expect(b.body.isEmpty)
            #expect(b.headers[1].1 == tag)
        }
        #expect(
            PacEndpoint.answer(method: "GET", ifNoneMatch: "\"stale\"", address: "p.corp:3128", settings: Self.settings)
                .status == 200)
        #expect(
            PacEndpoint.answer(method: "HEAD", ifNoneMatch: nil, address: "p.corp:3128", settings: Self.settings).status
                == 200)
    }

    @Test func refusesOtherMethodsAndAnUnknownAddress() {
        let post = PacEndpoint.answer(method: "POST", ifNoneMatch: nil, address: "p:1", settings: Self.settings)
        #expect(post.status == 405)
        #expect(post.headers.map(\.0) == ["Allow"])
        #expect(
            PacEndpoint.answer(method: "GET", ifNoneMatch: nil, address: nil, settings: Self.settings).status == 400)
    }

    @Test func theAdminRouterServesTheSameFile() {
        final class Backend: AdminBackend, @unchecked Sendable {
            func readiness() -> Readiness { Readiness(ready: true, reasons: []) }
            func statusReport() -> StatusReport { fatalError("not used") }
            func statusJSON() -> String { "{}" }
            func metricsExposition() -> [UInt8] { [] }
            func reload(trigger: String) -> (applied: Bool, message: String) { (true, "") }
            func pacInputs() -> (settings: PacEndpoint.Settings, listeners: [ListenAddress]) {
                (PacEndpointTests.settings, [ListenAddress(host: "127.0.0.1", port: 3128)])
            }
        }
        let r = AdminRouter.route(
            AdminRequest(method: "GET", target: "/proxy.pac", host: "127.0.0.1:9128"), hosts: [],
            backend: Backend())
        let direct = PacEndpoint.answer(
            method: "GET", ifNoneMatch: nil, address: "127.0.0.1:3128", settings: Self.settings)
        #expect(r.status == 200)
        #expect(r.contentType == PacEndpoint.contentType)
        #expect(r.body == Array(direct.body.utf8))
        let tag = PacEndpoint.etag(direct.body)
        let again = AdminRouter.route(
            AdminRequest(method: "GET", target: "/wpad.dat", host: "127.0.0.1:9128", ifNoneMatch: tag),
            hosts: [], backend: Backend())
        #expect(again.status == 304)
        // The DNS-rebinding guard holds for it as for every admin route.
        #expect(
            AdminRouter.route(
                AdminRequest(method: "GET", target: "/proxy.pac", host: "evil.example:9128"), hosts: [],
                backend: Backend()
            ).status != 200)
    }

    /// The served script defines one global, `FindProxyForURL`: the tables are inside it.
    @Test func theScriptDefinesNoGlobalButFindProxyForURL() {
        let script = PacScriptBuilder.script(
            rules: [PacScriptBuilder.Rule(scheme: "https", host: "gis.corp", wildcard: false, port: 443)],
            address: "p.corp:3128", fallback: .none)
        let topLevel = script.split(separator: "\n").filter { !$0.hasPrefix(" ") && !$0.hasPrefix("//") && !$0.isEmpty }
        #expect(topLevel == ["function FindProxyForURL(url, host) {", "}"])
        #expect(script.contains("    var authproxyHosts = {"))
    }

    @Test(
        arguments: [
            ("127.0.0.1:3128", nil, nil, nil),
            ("[::1]:3128", nil, nil, nil),
            ("localhost:3128", "same-origin", "empty", nil),
            ("proxy.corp:3128", "none", "document", nil),
            ("Proxy.Corp", nil, nil, nil),
            ("evil.example:3128", nil, nil, 421),
            ("127.0.0.1:3128", "cross-site", nil, 403),
            ("127.0.0.1:3128", "same-site", "empty", 403),
            ("127.0.0.1:3128", nil, "script", 403),
            ("127.0.0.1:3128", "same-origin", "Worker", 403),
        ] as [(String, String?, String?, Int?)])
    func whoMayReadThePacFile(_ host: String, _ site: String?, _ dest: String?, _ status: Int?) {
        let names = PacRequestPolicy.proxyListenerNames(pacHosts: [], pacAddress: "proxy.corp:3128")
        let r = PacRequestPolicy.refusal(host: host, secFetchSite: site, secFetchDest: dest, names: names)
        #expect(r?.status == status, "\(host) \(site ?? "-") \(dest ?? "-")")
    }

    @Test func theAdminListenerServesThePacFileOnlyToAllowedClients() {
        final class Backend: AdminBackend, @unchecked Sendable {
            func readiness() -> Readiness { Readiness(ready: true, reasons: []) }
            func statusReport() -> StatusReport { fatalError("not used") }
            func statusJSON() -> String { "{}" }
            func metricsExposition() -> [UInt8] { [] }
            func reload(trigger: String) -> (applied: Bool, message: String) { (true, "") }
            func pacInputs() -> (settings: PacEndpoint.Settings, listeners: [ListenAddress]) {
                (PacEndpointTests.settings, [ListenAddress(host: "127.0.0.1", port: 3128)])
            }
        }
        func status(_ client: String, site: String? = nil) -> Int {
            AdminRouter.route(
                AdminRequest(
                    method: "GET", target: "/proxy.pac", host: "127.0.0.1:9128", secFetchSite: site,
                    client: IPAddress.parse(client)), hosts: [], backend: Backend()
            ).status
        }
        #expect(status("127.0.0.1") == 200)
        #expect(status("10.1.2.3") == 403)
        #expect(status("127.0.0.1", site: "cross-site") == 403)
    }
}
