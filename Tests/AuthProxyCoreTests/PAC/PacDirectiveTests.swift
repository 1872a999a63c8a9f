import Testing

@testable import AuthProxyCore

/// `FindProxyForURL` answers read into failover lists, as browsers read them.
@Suite struct PacDirectiveTests {
    static func http(_ h: String, _ p: Int) -> PacDirective.Choice {
        .proxy(ParentProxy(scheme: .http, host: h, port: p))
    }
    static func https(_ h: String, _ p: Int) -> PacDirective.Choice {
        .proxy(ParentProxy(scheme: .https, host: h, port: p))
    }
    static func socks(_ h: String, _ p: Int) -> PacDirective.Choice {
        .proxy(ParentProxy(scheme: .socks5h, host: h, port: p))
    }

    static let table: [(answer: String, choices: [PacDirective.Choice], skipped: Int)] = [
        (
            "PROXY a:8080; HTTPS b:443; SOCKS5 c:1080; SOCKS d:1080; DIRECT",
            [http("a", 8080), https("b", 443), socks("c", 1080), socks("d", 1080), .direct], 0
        ),
        ("DIRECT", [.direct], 0),
        ("direct", [.direct], 0),
        ("proxy A.Corp.Example:3128", [http("a.corp.example", 3128)], 0),
        ("HTTP a:8080", [http("a", 8080)], 0),
        ("PROXY a", [http("a", 80)], 0),
        ("HTTPS b", [https("b", 443)], 0),
        ("SOCKS c", [socks("c", 1080)], 0),
        ("PROXY [::1]:3128", [.proxy(ParentProxy(scheme: .http, host: "::1", port: 3128))], 0),
        ("  PROXY   a:1 ;;  ; PROXY b:2;", [http("a", 1), http("b", 2)], 0),
        ("PROXY a:1\tDIRECT", [], 1),
        ("PROXY a:1; PROXY a:1", [http("a", 1)], 0),
        ("SOCKS4 s:1080; PROXY a:1", [http("a", 1)], 1),
        ("FTP x:21; PROXY a:1", [http("a", 1)], 1),
        ("PROXY a:99999; PROXY b:http; PROXY u@h:1; PROXY *.x:1", [], 4),
        ("PROXY", [], 1),
        ("DIRECT x:1", [], 1),
        ("", [], 0),
        ("garbage", [], 1),
    ]

    @Test(arguments: table.indices)
    func answersBecomeOrderedChoices(_ i: Int) {
        let row = Self.table[i]
        let d = PacDirective.parse(row.answer)
        #expect(d.choices == row.choices, "\(row.answer)")
        #expect(d.skipped.count == row.skipped, "\(row.answer): \(d.skipped)")
    }

    @Test func aSkippedEntrySaysWhy() {
        let d = PacDirective.parse("SOCKS4 s:1080; WHAT x:1; PROXY bad:port")
        #expect(
            d.skipped == [
                "SOCKS4 s:1080: SOCKS4 parents are not supported (SOCKS5 is)",
                "WHAT x:1: unknown keyword WHAT", "PROXY bad:port: bad:port is not a host:port",
            ])
    }

    static let routes: [(answer: String, parents: [String], fallbackDirect: Bool)] = [
        ("PROXY a:1; PROXY b:2; DIRECT", ["http://a:1", "http://b:2"], true),
        ("PROXY a:1; PROXY b:2", ["http://a:1", "http://b:2"], false),
        ("PROXY a:1; DIRECT; PROXY b:2", ["http://a:1"], true),
        ("DIRECT; PROXY a:1", [], true),
        ("DIRECT", [], true),
        // Nothing usable: direct, as in browsers.
        ("", [], true),
        ("SOCKS4 s:1; nonsense", [], true),
    ]

    @Test(arguments: routes.indices)
    func aDirectEndsTheFailoverList(_ i: Int) {
        let row = Self.routes[i]
        let r = PacDirective.parse(row.answer).route
        #expect(r.parents.map(\.url) == row.parents, "\(row.answer)")
        #expect(r.fallbackDirect == row.fallbackDirect, "\(row.answer)")
    }
}

/// The PAC answers' cache: per scheme, host and port; TTL; bounded; cleared by a new PAC file.
@Suite struct PacRouteCacheTests {
    typealias Key = PacRouteCache.Key
    static let direct = PacRouteCache.Answer.directive(PacDirective(choices: [.direct]))
    static let viaA = PacRouteCache.Answer.directive(PacDirective.parse("PROXY a:1"))

    @Test func answersAreKeptPerSchemeHostAndPort() {
        var c = PacRouteCache(ttlSeconds: 60, capacity: 10)
        c.insert(Self.viaA, for: Key(scheme: "https", host: "h", port: 443), now: 0)
        #expect(c.answer(Key(scheme: "https", host: "h", port: 443), now: 1) == Self.viaA)
        #expect(c.answer(Key(scheme: "http", host: "h", port: 443), now: 1) == nil)
        #expect(c.answer(Key(scheme: "https", host: "h", port: 8443), now: 1) == nil)
        #expect(c.answer(Key(scheme: "https", host: "g", port: 443), now: 1) == nil)
    }

    @Test func anAnswerExpiresAfterTheTTL() {
        var c = PacRouteCache(ttlSeconds: 60, capacity: 10)
        let k = Key(scheme: "http", host: "h", port: 80)
        c.insert(.failed("threw"), for: k, now: 1000)
        #expect(c.answer(k, now: 60_999) == .failed("threw"))
        #expect(c.answer(k, now: 61_000) == nil)
        c.insert(Self.direct, for: k, now: 61_000)
        #expect(c.answer(k, now: 61_001) == Self.direct)
    }

    @Test func aFullCacheDropsExpiredAnswersFirstThenTheOldest() {
        var c = PacRouteCache(ttlSeconds: 10, capacity: 3)
        for (i, at) in [0, 5_000, 6_000].enumerated() {
            c.insert(Self.direct, for: Key(scheme: "http", host: "h\(i)", port: 80), now: UInt64(at))
        }
        // At 11 s the first has expired: it goes, the other two stay.
        c.insert(Self.viaA, for: Key(scheme: "http", host: "h3", port: 80), now: 11_000)
        #expect(c.count == 3)
        #expect(c.answer(Key(scheme: "http", host: "h1", port: 80), now: 11_000) == Self.direct)
        // Nothing expired at 12 s: the oldest (h1, 5 s) goes.
        c.insert(Self.viaA, for: Key(scheme: "http", host: "h4", port: 80), now: 12_000)
        #expect(c.count == 3)
        #expect(c.answer(Key(scheme: "http", host: "h1", port: 80), now: 12_000) == nil)
        #expect(c.answer(Key(scheme: "http", host: "h2", port: 80), now: 12_000) == Self.direct)
        // Replacing a key never evicts another.
        c.insert(Self.direct, for: Key(scheme: "http", host: "h4", port: 80), now: 12_500)
        #expect(c.count == 3)
    }

    @Test func aNewPacFileClearsEveryAnswer() {
        var c = PacRouteCache()
        c.insert(Self.viaA, for: Key(scheme: "http", host: "h", port: 80), now: 0)
        c.clear()
        #expect(c.count == 0)
        #expect(c.answer(Key(scheme: "http", host: "h", port: 80), now: 0) == nil)
    }

    /// What FindProxyForURL is called with: no path, the default port left out, IPv6 in brackets.
    @Test(arguments: [
        (Key(scheme: "http", host: "h.example", port: 80), "http://h.example/"),
        (Key(scheme: "https", host: "h.example", port: 443), "https://h.example/"),
        (Key(scheme: "https", host: "h.example", port: 8443), "https://h.example:8443/"),
        (Key(scheme: "http", host: "h.example", port: 443), "http://h.example:443/"),
        (Key(scheme: "https", host: "::1", port: 443), "https://[::1]/"),
        (Key(scheme: "http", host: "10.0.0.1", port: 8080), "http://10.0.0.1:8080/"),
    ])
    func theURLThePacFileSees(_ key: Key, _ url: String) {
        #expect(PacResolver.url(for: key) == url)
    }
}

/// `[proxy] upstream_pac` and its companions.
@Suite struct UpstreamPacConfigTests {
    let loader = ConfigLoader(environment: [:])

    @Test(arguments: [
        ("http://wpad.corp.example/wpad.dat", PacSource.url("http://wpad.corp.example/wpad.dat")),
        ("https://wpad.corp.example/proxy.pac", PacSource.url("https://wpad.corp.example/proxy.pac")),
        ("file:///etc/authproxy/proxy.pac", PacSource.file("/etc/authproxy/proxy.pac")),
        ("/etc/authproxy/proxy.pac", PacSource.file("/etc/authproxy/proxy.pac")),
    ])
    func aPacLocation(_ text: String, _ source: PacSource) throws {
        let c = try loader.parse("[proxy]\nupstream_pac = \"\(text)\"\nno_proxy = [\"<local>\"]\n")
        #expect(c.upstreamProxy.pac == source)
        #expect(c.upstreamProxy.pacRefreshSeconds == 300)
        #expect(c.upstreamProxy.parents.isEmpty)
        #expect(c.upstreamProxy.isConfigured)
    }

    @Test func theRefreshPeriod() throws {
        let c = try loader.parse("[proxy]\nupstream_pac = \"/p.pac\"\nupstream_pac_refresh_seconds = 60\n")
        #expect(c.upstreamProxy.pacRefreshSeconds == 60)
        #expect(c.upstreamProxy.pacTimeoutSeconds == 10)
        let t = try loader.parse("[proxy]\nupstream_pac = \"/p.pac\"\nupstream_pac_timeout_seconds = 3\n")
        #expect(t.upstreamProxy.pacTimeoutSeconds == 3)
    }

    @Test func theParentCredentialGoesToListedParentsOnlyAndCheckWarns() {
        var u = UpstreamProxyConfig()
        u.pac = .url("http://wpad.corp.example/wpad.dat")
        u.credentialName = "corp"
        let a = ParentProxy.parse("http://p.corp:3128")!
        let v6 = ParentProxy.parse("http://[fd00::1]:8080")!
        #expect(u.mayAuthenticate(a) && u.mayAuthenticate(v6))
        #expect(u.warnings.count == 2)
        #expect(u.warnings[0].contains("without TLS"))
        #expect(u.warnings[1].contains("upstream_proxy_credential_parents"))
        u.credentialParents = ["p.corp:3128", "[fd00::1]:8080"]
        u.pac = .url("https://wpad.corp.example/wpad.dat")
        #expect(u.mayAuthenticate(a) && u.mayAuthenticate(v6))
        #expect(!u.mayAuthenticate(ParentProxy.parse("http://169.254.169.254:80")!))
        #expect(!u.mayAuthenticate(ParentProxy.parse("http://p.corp:3129")!))
        #expect(u.warnings.isEmpty)
        u.pac = .file("/etc/p.pac")
        #expect(u.warnings.isEmpty)
    }

    @Test(arguments: [
        ("[proxy]\nupstream_proxy = \"http://p:8080\"\nupstream_pac = \"/p.pac\"\n", "upstream_proxy and upstream_pac"),
        ("[proxy]\nupstream_pac = \"wpad.dat\"\n", "is not a PAC file location"),
        ("[proxy]\nupstream_pac = \"ftp://h/p.pac\"\n", "is not a PAC file location"),
        ("[proxy]\nupstream_pac = \"file://relative/p.pac\"\n", "is not a PAC file location"),
        ("[proxy]\nupstream_pac_refresh_seconds = 60\n", "applies only with upstream_pac"),
        ("[proxy]\nupstream_pac = \"/p.pac\"\nupstream_pac_refresh_seconds = 0\n", "upstream_pac_refresh_seconds"),
        ("[proxy]\nupstream_pac_timeout_seconds = 5\n", "applies only with upstream_pac"),
        (
            "[proxy]\nupstream_pac = \"/p.pac\"\nupstream_proxy_credential_parents = [\"p:1\"]\n",
            "applies only with upstream_proxy_credential"
        ),
        (
            "[proxy]\nupstream_pac = \"/p.pac\"\nupstream_proxy_credential = \"c\"\nupstream_proxy_credential_parents = [\"http://p:1\"]\n",
            "is not a parent's host:port"
        ),
        (
            "[proxy]\nupstream_pac = \"/p.pac\"\nupstream_proxy_credential = \"c\"\nupstream_proxy_credential_parents = [\"p\"]\n",
            "is not a parent's host:port"
        ),
        ("[proxy]\nupstream_pac = \"/p.pac\"\nupstream_pac_timeout_seconds = 0\n", "upstream_pac_timeout_seconds"),
    ])
    func aRefusedSetting(_ text: String, _ says: String) {
        do {
            _ = try loader.parse(text)
            Issue.record("accepted: \(text)")
        } catch {
            #expect(error.description.contains(says), "\(error.description)")
        }
    }
}
