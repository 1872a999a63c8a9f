import Testing

@testable import AuthProxyCore

@Suite struct PathNormalizerTests {
    @Test(arguments: [
        ("/arcgis/rest/services", "/arcgis/rest/services"),
        ("/arcgis/../other", "/other"),
        ("/arcgis/%2e%2e/other", "/other"),
        ("/arcgis/%2E%2E/other", "/other"),
        ("/arcgis/.%2e/other", "/other"),
        ("/arcgis/./rest/./x", "/arcgis/rest/x"),
        ("/arcgis/rest/..", "/arcgis/"),
        ("/arcgis/rest/.", "/arcgis/rest/"),
        ("/../../etc", "/etc"),
        ("/%61rcgis/rest", "/arcgis/rest"),
        ("/arcgis/a%20b", "/arcgis/a%20b"),
        ("/arcgis/a%3fb", "/arcgis/a%3Fb"),
        ("/arcgis/", "/arcgis/"),
        ("/", "/"),
        ("/a;b/c", "/a;b/c"),
        ("/arcgis/...", "/arcgis/..."),
        ("/arcgis/rest/query.json", "/arcgis/rest/query.json"),
        ("/a.b/.c/d.", "/a.b/.c/d."),
        ("/a/b/..", "/a/"),
        ("/a/b/../", "/a/"),
        ("/a/./", "/a/"),
        ("/a//b.json", "/a//b.json"),
        ("/.well-known/x", "/.well-known/x"),
        // A literal % in a name (`%25` not followed by an encoded dot or slash) stays a name.
        ("/arcgis/100%25/x", "/arcgis/100%25/x"),
        ("/arcgis/a%2541", "/arcgis/a%2541"),
        ("/arcgis/..x%3b/y", "/arcgis/..x%3B/y"),
    ])
    func normalizes(path: String, expected: String) {
        #expect(PathNormalizer.normalize(Substring(path)) == .normal(expected))
    }

    @Test(arguments: [
        "/arcgis/%2E%2E%2Fother", "/arcgis%2fother", "/arcgis/..;/other", "/arcgis/.;x/other",
        "/arcgis\\..\\other", "/arcgis/%5c..", "/arcgis//../other",
        // IIS decodes %uXXXX, so any % that is not an escape is ambiguous.
        "/arcgis/%u002e%u002e/admin", "/arcgis/%U002E%U002E/admin", "/arcgis/%", "/arcgis/%4", "/arcgis/%zz",
        // Double-encoded dots and slashes, an encoded NUL, and `..%3b`.
        "/arcgis/%252e%252e/admin", "/arcgis/%252E./admin", "/arcgis%252fadmin", "/arcgis/..%3b/admin",
        "/arcgis/.%3Bx/admin", "/arcgis/..%00/admin",
        // Double encoding written with a mix of escapes: `%252%65` is `%252e` once the unreserved `%65` is decoded,
        // and a server that decodes twice sees `%2e`, then a dot (found by the URL fuzz target).
        "/arcgis/%252%65%252%65/admin", "/arcgis/%25%32%65%25%32%65/admin", "/arcgis%25%32%66admin",
        "/%252%656%2528",
    ])
    func ambiguous(path: String) {
        guard case .ambiguous = PathNormalizer.normalize(Substring(path)) else {
            Issue.record("\(path) should be ambiguous")
            return
        }
    }

    @Test func matchingUsesNormalizedPaths() throws {
        let p = try #require(MatchPrefix.parse("http://h/arcgis"))
        for (raw, expected) in [
            ("/arcgis/rest", true), ("/arcgis/../other", false), ("/arcgis/%2e%2e/other", false),
            ("/x/../arcgis/y", true),
        ] {
            guard case .normal(let n) = PathNormalizer.normalize(Substring(raw)) else {
                Issue.record("\(raw)")
                continue
            }
            #expect(p.matches(URLTarget(scheme: "http", host: "h", port: 80, pathAndQuery: n)) == expected, "\(raw)")
        }
    }

    @Test func encodedTokenFieldNamesAreRecognised() {
        let h = HTTPHeaders()
        #expect(TokenInjection.clientHasToken(pathAndQuery: "/x", headers: h, form: Array("%74oken=abc&f=json".utf8)))
        #expect(TokenInjection.clientHasToken(pathAndQuery: "/x?%54OKEN=abc", headers: h))
        #expect(!TokenInjection.clientHasToken(pathAndQuery: "/x?tokens=abc", headers: h))
        let applied = TokenInjection.apply(
            token: "T", site: .form, pathAndQuery: "/x", headers: h, form: Array("%74oken=client&f=json".utf8))
        #expect(applied.form.map { String(decoding: $0, as: UTF8.self) } == "f=json&token=T")
        #expect(TokenInjection.queryHasField("/q?f=json&%63allback=x", "callback"))
        #expect(!TokenInjection.queryHasField("/q?f=json&callbacks=x", "callback"))
    }
}
