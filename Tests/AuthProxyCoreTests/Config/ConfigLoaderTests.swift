import Testing

@testable import AuthProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// Checks that `loader` refuses `text` with an error naming `key`, `line` and a `fragment` of the message.
func expectRejected(
    _ loader: ConfigLoader, _ text: String, key: String, line: Int?, fragment: String,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    do {
        _ = try loader.parse(text)
        Issue.record("accepted: \(text)", sourceLocation: sourceLocation)
    } catch {
        #expect(error.key == key, sourceLocation: sourceLocation)
        #expect(error.line == line, sourceLocation: sourceLocation)
        #expect(error.description.contains(fragment), "\(error)", sourceLocation: sourceLocation)
    }
}

@Suite struct ConfigLoaderTests {
    let loader = ConfigLoader(environment: ["LISTEN": "127.0.0.1:9999", "EMPTY": ""])

    @Test func defaults() throws {
        let c = try loader.parse("")
        #expect(c.listen == [ListenAddress(host: "127.0.0.1", port: 3128)])
        #expect(c.connectPorts == [443])
        #expect(c.unmatched == .relay)
        #expect(c.upstreamTimeoutSeconds == 60)
    }

    @Test func pacAndInterceptionSettings() throws {
        let d = try loader.parse("")
        #expect(d.pacAddress == nil)
        #expect(d.pacFallback == .none)
        #expect(d.tls.noIntercept.isEmpty)
        let c = try loader.parse(
            """
            [proxy]
            pac_address = "Proxy.Corp.example:3128"
            pac_fallback = "direct"

            [tls]
            no_intercept = ["iis.corp", "*.farm.corp:443"]

            [[credential]]
            name = "win"
            type = "password"
            username = "u"
            password = "p"
            intercept = false
            match = "https://iis.corp/"

            [[credential]]
            name = "key"
            type = "api-key"
            key = "k"
            match = "https://gis.corp/"
            """)
        #expect(c.pacAddress == "proxy.corp.example:3128")
        #expect(c.pacFallback == .direct)
        #expect(c.tls.noIntercept.map(\.description) == ["iis.corp", "*.farm.corp:443"])
        #expect(c.credentials.map(\.intercept) == [false, true])
        expectRejected(
            loader, "[proxy]\npac_address = \"http://proxy:3128\"", key: "proxy.pac_address", line: 2,
            fragment: "is not a host:port")
        expectRejected(
            loader, "[proxy]\npac_address = \"proxy\"", key: "proxy.pac_address", line: 2,
            fragment: "is not a host:port")
        expectRejected(
            loader, "[proxy]\npac_fallback = \"never\"", key: "proxy.pac_fallback", line: 2, fragment: "\"direct\"")
        expectRejected(
            loader, "[tls]\nno_intercept = [\"https://iis.corp/\"]", key: "tls.no_intercept", line: 2,
            fragment: "is not a host, host:port or *.domain")
        expectRejected(
            loader, "[tls]\nno_intercept = \"iis.corp\"", key: "tls.no_intercept", line: 2, fragment: "array")
    }

    @Test func fullProxySection() throws {
        let c = try loader.parse(
            """
            # comment
            [proxy]
            listen = ["127.0.0.1:3128", "[::1]:3129"]   # two
            connect_ports = [443, 8443]
            unmatched = "deny"
            state_dir = "/var/lib/authproxy"
            upstream_timeout_seconds = 5
            header_timeout_seconds = 7
            idle_timeout_seconds = 9
            shutdown_grace_seconds = 0
            workers = 3
            [log]
            level = "debug"
            format = "json"
            """)
        #expect(c.listen == [ListenAddress(host: "127.0.0.1", port: 3128), ListenAddress(host: "::1", port: 3129)])
        #expect(c.connectPorts == [443, 8443])
        #expect(c.unmatched == .deny)
        #expect(c.stateDir == "/var/lib/authproxy")
        #expect(c.upstreamTimeoutSeconds == 5)
        #expect(c.headerTimeoutSeconds == 7)
        #expect(c.idleTimeoutSeconds == 9)
        #expect(c.shutdownGraceSeconds == 0)
        #expect(c.workers == 3)
        #expect(c.logLevel == .debug)
        #expect(c.logFormat == .json)
    }

    @Test func environmentAndFileSecrets() throws {
        let c = try loader.parse("[proxy]\nlisten = [\"${LISTEN}\"]\n")
        #expect(c.listen == [ListenAddress(host: "127.0.0.1", port: 9999)])
        let path = "/tmp/authproxy-config-test-\(getpid())"
        let fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0o600)
        let text = "  /srv/state \n"
        _ = text.withCString { write(fd, $0, strlen($0)) }
        close(fd)
        defer { unlink(path) }
        let d = try loader.parse("[proxy]\nstate_dir = \"file:\(path)\"\n")
        #expect(d.stateDir == "/srv/state")
    }

    /// Each bad file and what the error must name.
    @Test(arguments: [
        ("[proxy]\nlisten = \"127.0.0.1:3128\"\n", "proxy.listen", 2, "expected an array"),
        ("[proxy]\nlisten = [\"nonsense\"]\n", "proxy.listen", 2, "not an address"),
        ("[proxy]\n\nlisten = []\n", "proxy.listen", 3, "at least one"),
        ("[proxy]\nlisen = [\"127.0.0.1:1\"]\n", "proxy.lisen", 2, "unknown key"),
        ("[proxy]\nunmatched = \"allow\"\n", "proxy.unmatched", 2, "\"relay\", \"deny\""),
        ("[proxy]\nconnect_ports = [443, 70000]\n", "proxy.connect_ports", 2, "outside"),
        ("[proxy]\nupstream_timeout_seconds = \"60\"\n", "proxy.upstream_timeout_seconds", 2, "expected an integer"),
        ("[proxy]\nlisten = [\"${NOPE}\"]\n", "proxy.listen", 2, "NOPE is not set"),
        ("[proxy]\nstate_dir = \"file:/nonexistent/secret\"\n", "proxy.state_dir", 2, "cannot read secret file"),
        ("[log]\nlevel = \"loud\"\n", "log.level", 2, "not one of"),
        ("[log]\nformat = \"xml\"\n", "log.format", 2, "\"text\", \"json\""),
        ("[logs]\n", "logs", 1, "unknown key"),
        ("[proxy]\nlisten = [\"127.0.0.1:1\"\n", "", 2, "TOML syntax error"),
        ("[proxy]\nworkers = 1\nworkers = 2\n", "", 3, "defined twice"),
        (
            "[[credential]]\nname = \"a\"\ntype = \"api-key\"\nmatch = \"ftp://x\"\n", "credential[0].match", 4,
            "not a URL prefix"
        ),
        ("[[credential]]\ntype = \"api-key\"\n", "credential[0].name", 1, "needs a name"),
        ("[proxy]\nstate_key = \"short\"\n", "proxy.state_key", 2, "at least 16"),
        // A misspelt required key is named with its line, not reported as the key missing.
        (
            "[[credential]]\nname = \"a\"\ntype = \"arcgis-token\"\nmatch = \"https://h/arcgis\"\nusername = \"u\"\npasword = \"p\"\n",
            "credential[0].pasword", 6, "did you mean password?"
        ),
        ("[[credential]]\nname = \"a\"\ntpye = \"api-key\"\n", "credential[0].tpye", 3, "did you mean type?"),
        ("[[client]]\nname = \"c\"\npassowrd = \"x\"\n", "client[0].passowrd", 3, "did you mean password?"),
        // Nothing near: the missing key itself.
        (
            "[[credential]]\nname = \"a\"\ntype = \"api-key\"\nmatch = \"https://h\"\nvalue = \"k\"\n",
            "credential[0].key", 1, "needs key"
        ),
        // What `authproxy doctor` left to fill in.
        (
            "[[credential]]\nname = \"a\"\ntype = \"arcgis-token\"\nmatch = \"https://h/arcgis\"\nusername = \"REPLACE_ME\"\n",
            "credential[0].username", 5, "still the placeholder REPLACE_ME"
        ),
    ])
    func rejects(_ text: String, _ key: String, _ line: Int, _ fragment: String) {
        expectRejected(loader, text, key: key, line: line, fragment: fragment)
    }

    @Test func editDistance() {
        #expect(TableReader.editDistance("password", "pasword") == 1)
        #expect(TableReader.editDistance("type", "tpye") == 2)
        #expect(TableReader.editDistance("key", "key") == 0)
        #expect(TableReader.editDistance("", "abc") == 3)
        #expect(TableReader.editDistance("token_url", "username") > 2)
    }

    @Test func secretValuesAreNotEchoedInErrors() {
        let l = ConfigLoader(environment: ["SECRET": "hunter2-not-an-address"])
        do {
            _ = try l.parse("[proxy]\nconnect_ports = \"${SECRET}\"\n")
            Issue.record("accepted")
        } catch {
            #expect(!error.description.contains("hunter2"))
        }
    }
}

@Suite struct TOMLParserTests {
    @Test func values() throws {
        let t = try TOMLParser.parse(
            """
            a = "x\\ty\\u00e9"
            b = 'C:\\path'
            c = 1_000
            d = 0x1F
            e = 3.5
            f = true
            g = 2026-11-21T10:00:00Z
            h = [1, 2,
                 3, ]  # trailing comma
            i = { x = 1, y = "z" }
            j = \"\"\"
            line1
            line2\"\"\"
            k.l = 5
            [[arr]]
            n = 1
            [[arr]]
            n = 2
            """)
        guard case .string(let a) = t["a"]?.value else { Issue.record("a"); return }
        #expect(a == "x\ty\u{e9}")
        guard case .string(let b) = t["b"]?.value, case .integer(let c) = t["c"]?.value,
            case .integer(let d) = t["d"]?.value,
            case .float(let e) = t["e"]?.value, case .bool(let f) = t["f"]?.value,
            case .datetime(let g) = t["g"]?.value,
            case .array(let h) = t["h"]?.value, case .table(let i) = t["i"]?.value, case .string(let j) = t["j"]?.value,
            case .table(let k) = t["k"]?.value, case .array(let arr) = t["arr"]?.value
        else { Issue.record("types"); return }
        #expect(b == "C:\\path")
        #expect(c == 1000)
        #expect(d == 31)
        #expect(e == 3.5)
        #expect(f)
        #expect(g == "2026-11-21T10:00:00Z")
        #expect(h.count == 3)
        #expect(i["y"] != nil)
        #expect(j == "line1\nline2")
        #expect(k["l"]?.line == 14)
        #expect(arr.count == 2)
        #expect(arr[1].line == 17)
    }

    /// Nesting is bounded (a fuzzing finding: 4 KB of `[` overflowed the stack).
    @Test func nestingDepthIsBounded() throws {
        let deep = TOMLParser.maxDepth
        _ = try TOMLParser.parse("a = " + String(repeating: "[", count: deep) + String(repeating: "]", count: deep))
        _ = try TOMLParser.parse(
            "a = " + String(repeating: "{b = ", count: deep) + "1" + String(repeating: "}", count: deep))
        _ = try TOMLParser.parse(Array(repeating: "a", count: deep).joined(separator: ".") + " = 1")
        for text in [
            "a = " + String(repeating: "[", count: 100_000), "a = " + String(repeating: "[{x = ", count: 50_000),
            // A chain of tables this long crashed when released (recursive deinit), not while parsed.
            "a" + String(repeating: ".a", count: 200_000) + " = 1",
            "[a" + String(repeating: ".a", count: 200_000) + "]",
        ] {
            #expect(throws: TOMLError.self) { try TOMLParser.parse(text) }
        }
    }

    @Test(arguments: ["a = ", "a = \"open", "[t]\n[t]", "a = 1 b = 2", "a = [1 2]", "a = 07", "= 1"])
    func rejects(_ text: String) {
        #expect(throws: TOMLError.self) { try TOMLParser.parse(text) }
    }
}

@Suite struct MatchPrefixTests {
    @Test func segments() throws {
        let p = try #require(MatchPrefix.parse("https://gis.example.com/arcgis/"))
        let yes = URLTarget(
            scheme: "https", host: "gis.example.com", port: 443, pathAndQuery: "/arcgis/rest/services?f=json")
        let exact = URLTarget(scheme: "https", host: "gis.example.com", port: 443, pathAndQuery: "/arcgis")
        let sibling = URLTarget(scheme: "https", host: "gis.example.com", port: 443, pathAndQuery: "/arcgisdata/x")
        let otherPort = URLTarget(scheme: "https", host: "gis.example.com", port: 8443, pathAndQuery: "/arcgis/x")
        let otherScheme = URLTarget(scheme: "http", host: "gis.example.com", port: 443, pathAndQuery: "/arcgis/x")
        #expect(p.matches(yes))
        #expect(p.matches(exact))
        #expect(!p.matches(sibling))
        #expect(!p.matches(otherPort))
        #expect(!p.matches(otherScheme))
    }

    @Test func wildcard() throws {
        let p = try #require(MatchPrefix.parse("https://*.example.com"))
        #expect(p.matches(URLTarget(scheme: "https", host: "a.b.example.com", port: 443, pathAndQuery: "/")))
        #expect(!p.matches(URLTarget(scheme: "https", host: "example.com", port: 443, pathAndQuery: "/")))
        #expect(!p.matches(URLTarget(scheme: "https", host: "badexample.com", port: 443, pathAndQuery: "/")))
    }

    /// Found by the `url` fuzz target: a `?` followed by a combining mark is one Character with it, so a Character
    /// search missed it and the prefix kept a query in its path (and then matched nothing below it).
    @Test func aQueryOrFragmentIsRefusedAlsoBeforeACombiningMark() {
        #expect(MatchPrefix.parse("http://h/a?\u{6DC}b") == nil)
        #expect(MatchPrefix.parse("http://h/a#\u{301}") == nil)
        #expect(MatchPrefix.parse("http://h/a/\u{301}b")?.path == "/a/\u{301}b")
    }
}
