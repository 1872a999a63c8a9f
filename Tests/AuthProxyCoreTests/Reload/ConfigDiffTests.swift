import Testing

@testable import AuthProxyCore

/// ``ConfigDiff`` on pairs of parsed configurations: which credentials keep their tokens, which settings
/// apply live and which need a restart (and keep their running value).
@Suite struct ConfigDiffTests {
    let loader = ConfigLoader(environment: [:])

    static let base = """
        [proxy]
        listen = ["127.0.0.1:3128"]
        state_dir = "/tmp/a"
        max_connections = 100

        [[credential]]
        name = "keep"
        type = "api-key"
        key = "K1"
        match = "https://a.example/arcgis"

        [[credential]]
        name = "rotate"
        type = "arcgis-token"
        username = "u"
        password = "p1"
        match = "https://b.example/arcgis"

        [[credential]]
        name = "gone"
        type = "api-key"
        key = "G"
        match = "https://c.example/"
        """

    func diff(_ old: String, _ new: String) throws -> ConfigDiff {
        ConfigDiff(running: try loader.parse(old), loaded: try loader.parse(new))
    }

    @Test func identicalFilesChangeNothing() throws {
        let d = try diff(Self.base, Self.base)
        #expect(d.isEmpty)
        #expect(d.kept == ["keep", "rotate", "gone"])
        #expect(d.changed.isEmpty && d.added.isEmpty && d.removed.isEmpty && d.restartNeeded.isEmpty)
    }

    @Test func credentialsAddedChangedRemovedKept() throws {
        let new = Self.base
            .replacingOccurrences(of: "password = \"p1\"", with: "password = \"p2\"")
            .replacingOccurrences(of: "name = \"gone\"", with: "name = \"fresh\"")
        let d = try diff(Self.base, new)
        #expect(d.kept == ["keep"])
        #expect(d.changed == ["rotate"])
        #expect(d.added == ["fresh"])
        #expect(d.removed == ["gone"])
        #expect(!d.isEmpty)
    }

    @Test func aChangedMatchPrefixIsAChangedIdentity() throws {
        let new = Self.base.replacingOccurrences(of: "https://a.example/arcgis", with: "https://a.example/other")
        let d = try diff(Self.base, new)
        #expect(d.changed == ["keep"])
    }

    @Test func settingsThatDoNotMakeATokenKeepIt() throws {
        let new = Self.base.replacingOccurrences(
            of: "key = \"K1\"",
            with: "key = \"K1\"\ntoken_placement = \"header\"\nrate_limit = { requests = 5, per_seconds = 1 }")
        let d = try diff(Self.base, new)
        #expect(d.kept.contains("keep"))
        #expect(d.retuned == ["keep"])
        #expect(d.changed.isEmpty)
    }

    @Test func aNetworkCredentialsSchemesAreARetuning() throws {
        let pw =
            Self.base
            + "\n[[credential]]\nname = \"iis\"\ntype = \"password\"\nusername = \"u\"\npassword = \"p\"\nmatch = \"http://c.example\"\n"
        let d = try diff(pw, pw + "allow_basic_over_http = true\n")
        #expect(d.retuned == ["iis"])
        #expect(d.changed.isEmpty)
        #expect(!d.isEmpty)
    }

    @Test func aClientsNewPasswordIsAChange() throws {
        let c = Self.base + "\n[[client]]\nname = \"app\"\npassword = \"old-secret\"\n"
        #expect(try diff(c, c).isEmpty)
        let d = try diff(c, c.replacingOccurrences(of: "old-secret", with: "new-secret"))
        #expect(d.live == ["client"])
    }

    @Test func restartSettingsKeepTheirRunningValue() throws {
        let new =
            Self.base
            .replacingOccurrences(of: "127.0.0.1:3128", with: "127.0.0.1:3129")
            .replacingOccurrences(of: "/tmp/a", with: "/tmp/b")
            .replacingOccurrences(
                of: "max_connections = 100",
                with: "max_connections = 50\nworkers = 3\nstate_key = \"0123456789abcdef-secret\"")
            + "\n[admin]\nlisten = \"127.0.0.1:9128\"\n[log]\nformat = \"json\"\n"
        let old = try loader.parse(Self.base)
        let d = ConfigDiff(running: old, loaded: try loader.parse(new))
        #expect(
            d.restartNeeded.map(\.key) == [
                "proxy.listen", "proxy.workers", "proxy.state_dir", "proxy.state_key", "admin.listen", "log.format",
            ])
        #expect(
            d.restartNeeded[0] == .init(key: "proxy.listen", running: "127.0.0.1:3128", configured: "127.0.0.1:3129"))
        // The secret is never shown.
        #expect(!d.restartNeeded.contains { "\($0)".contains("0123456789abcdef") })
        #expect(d.effective.listen == old.listen)
        #expect(d.effective.workers == old.workers)
        #expect(d.effective.stateDir == "/tmp/a")
        #expect(d.effective.stateKey == nil)
        #expect(d.effective.admin == nil)
        #expect(d.effective.logFormat == .text)
        // What applies live does.
        #expect(d.live == ["proxy.max_connections", "proxy.max_connections_per_client"])
        #expect(d.effective.maxConnections == 50)
    }

    @Test func liveSettingsAreListed() throws {
        let new =
            Self.base.replacingOccurrences(
                of: "max_connections = 100",
                with: """
                    max_connections = 100
                    unmatched = "deny"
                    connect_ports = [443, 8443]
                    idle_timeout_seconds = 5
                    watch_config = true
                    http_client = "libcurl"
                    """) + "\n[log]\nlevel = \"debug\"\n"
        let d = try diff(Self.base, new)
        #expect(
            d.live == [
                "proxy.connect_ports", "proxy.unmatched", "proxy.idle_timeout_seconds", "proxy.watch_config",
                "proxy.http_client", "log.level",
            ])
        #expect(d.restartNeeded.isEmpty)
        #expect(d.effective.idleTimeoutSeconds == 5)
    }

    /// The PAC file's settings and the interception exceptions apply to the next fetch or CONNECT; `intercept` on a
    /// credential keeps its tokens.
    @Test func pacAndInterceptionExceptionsApplyLive() throws {
        let new =
            Self.base.replacingOccurrences(
                of: "max_connections = 100",
                with: "max_connections = 100\npac_address = \"gw.example:3128\"\npac_fallback = \"direct\""
            )
            .replacingOccurrences(of: "key = \"K1\"", with: "key = \"K1\"\nintercept = false")
            + "\n[tls]\nno_intercept = [\"iis.example\"]\n"
        let d = try diff(Self.base, new)
        #expect(d.live == ["proxy.pac_address", "proxy.pac_fallback", "tls"])
        #expect(d.retuned == ["keep"])
        #expect(d.changed.isEmpty)
        #expect(d.restartNeeded.isEmpty)
        #expect(d.effective.pacAddress == "gw.example:3128")
    }

    @Test func adminAllowAppliesWhileItsListenerStays() throws {
        let old = Self.base + "\n[admin]\nlisten = \"127.0.0.1:9128\"\n"
        let new = Self.base + "\n[admin]\nlisten = \"127.0.0.1:9129\"\nallow = [\"10.0.0.0/8\"]\n"
        let d = try diff(old, new)
        #expect(d.restartNeeded.map(\.key) == ["admin.listen"])
        #expect(d.live == ["admin.allow"])
        #expect(d.effective.admin?.listen.port == 9128)
        #expect(d.effective.admin?.allow.map(\.description) == ["10.0.0.0/8"])
    }
}
