import Testing

@testable import AuthProxyCore

/// The index answers what the matching rule says: the prefix that ``MatchPrefix/matches(_:)`` accepts with the
/// highest ``MatchPrefix/specificity``, the first written among equals. The rule is applied here directly, as a
/// scan, and compared with the index on generated prefixes and requests.
@Suite struct MatchIndexTests {
    /// The rule, as a scan over every prefix.
    static func ruled(_ entries: [(Int, [MatchPrefix])], _ target: URLTarget) -> Int? {
        var best: (index: Int, score: Int)? = nil
        for (i, match) in entries {
            for p in match where p.matches(target) {
                if best == nil || p.specificity > best!.score { best = (i, p.specificity) }
            }
        }
        return best?.index
    }

    static func prefix(_ s: String) -> MatchPrefix { MatchPrefix.parse(s)! }

    static func target(_ url: String) -> URLTarget { HTTPURL.parse(url)!.target }

    @Test func longerPathThenExactHostThenLongerWildcardThenFirstWritten() {
        let entries: [(Int, [MatchPrefix])] = [
            (0, [Self.prefix("https://*.example.com")]),
            (1, [Self.prefix("https://*.b.example.com/arcgis")]),
            (2, [Self.prefix("https://a.b.example.com")]),
            (3, [Self.prefix("https://a.b.example.com/arcgis/rest")]),
            (4, [Self.prefix("https://a.b.example.com/arcgis/rest")]),
            (5, [Self.prefix("http://a.b.example.com:8080/arcgis")]),
        ]
        let index = MatchIndex(entries)
        let cases: [(String, Int?)] = [
            ("https://a.b.example.com/arcgis/rest/services/x", 3),
            ("https://a.b.example.com/arcgis/restx", 1),
            ("https://a.b.example.com/other", 2),
            ("https://c.b.example.com/arcgis/x", 1),
            ("https://c.b.example.com/x", 0),
            ("https://example.com/", nil),
            ("http://a.b.example.com:8080/arcgis", 5),
            ("http://a.b.example.com/arcgis", nil),
            ("https://a.b.example.com:8443/arcgis", nil),
        ]
        for (url, expected) in cases {
            #expect(index.best(for: Self.target(url)) == expected, "\(url)")
            #expect(Self.ruled(entries, Self.target(url)) == expected, "\(url)")
        }
    }

    @Test func pathlessMatchesTheOriginWhateverThePath() {
        let index = MatchIndex([(0, [Self.prefix("https://h.example.com/arcgis/rest/services/A")])], pathless: true)
        #expect(index.best(for: Self.target("https://h.example.com/")) == 0)
        #expect(index.best(for: Self.target("https://h.example.com/portal/sharing")) == 0)
        #expect(index.best(for: Self.target("http://h.example.com/")) == nil)
    }

    /// Generated prefixes over a small alphabet of hosts and path segments (so that they collide, nest and tie), and
    /// requests drawn from the same alphabet: the index and the rule agree on every one.
    @Test func agreesWithTheRuleOnGeneratedPrefixes() {
        var rng = SplitMix(seed: 0x5eed)
        var matched = 0, unmatched = 0
        let hosts = ["a.example.com", "b.a.example.com", "example.com", "x.b.a.example.com", "127.0.0.1", "::1"]
        let segments = ["arcgis", "rest", "services", "A", "Ab", "sharing", "%41", "é"]
        func path(_ depth: Int) -> String {
            (0..<depth).map { _ in "/" + segments[rng.next(segments.count)] }.joined()
        }
        for round in 0..<200 {
            var entries: [(Int, [MatchPrefix])] = []
            for i in 0..<(1 + rng.next(12)) {
                var match: [MatchPrefix] = []
                for _ in 0..<(1 + rng.next(2)) {
                    let host = hosts[rng.next(hosts.count)]
                    let wildcard = !host.contains(":") && host.first!.isLetter && rng.next(3) == 0
                    let scheme = rng.next(4) == 0 ? "http" : "https"
                    let port = rng.next(5) == 0 ? ":8443" : ""
                    let h = host.contains(":") ? "[\(host)]" : host
                    let text =
                        "\(scheme)://\(wildcard ? "*." : "")\(h)\(port)\(path(rng.next(4)))\(rng.next(6) == 0 ? "/" : "")"
                    if let p = MatchPrefix.parse(text) { match.append(p) }
                }
                entries.append((i, match))
            }
            let index = MatchIndex(entries)
            for _ in 0..<40 {
                let host = hosts[rng.next(hosts.count)]
                let h = host.contains(":") ? "[\(host)]" : host
                let scheme = rng.next(4) == 0 ? "http" : "https"
                let port = rng.next(5) == 0 ? ":8443" : ""
                let trailing = rng.next(5) == 0 ? "/" : ""
                let query = rng.next(3) == 0 ? "?token=x&f=json" : ""
                let url = "\(scheme)://\(h)\(port)\(path(rng.next(6)))\(trailing)\(query)"
                guard let t = HTTPURL.parse(url)?.target else { continue }
                let expected = Self.ruled(entries, t)
                #expect(index.best(for: t) == expected, "round \(round): \(url)")
                if expected == nil { unmatched += 1 } else { matched += 1 }
            }
        }
        // The generated cases exercise both answers, not only "no match".
        #expect(matched > 1_000 && unmatched > 1_000, "matched \(matched), unmatched \(unmatched)")
    }

    /// The store answers through the index: with 10,000 credentials, one per service, and the one a request
    /// matches declared last, it is found (and so is a host-only one, by origin).
    @Test func storeFindsTheLastOfTenThousand() {
        var credentials: [Credential] = []
        for i in 0..<10_000 {
            credentials.append(
                Credential(
                    name: "svc\(i)", kind: .header([HeaderField(name: "X-Key", value: "v\(i)")]),
                    match: [Self.prefix("https://gis.example.com/arcgis/rest/services/S\(i)")], placement: .param,
                    overrideClientToken: false, line: i + 1))
        }
        let store = CredentialStore(credentials)
        let t = Self.target("https://gis.example.com/arcgis/rest/services/S9999/MapServer/export?f=image")
        #expect(store.tokenCredential(for: t)?.name == "svc9999")
        #expect(store.tokenCredential(for: Self.target("https://gis.example.com/arcgis/rest/services/S99999")) == nil)
        #expect(store.matchesAny(t))
        #expect(store.matchesOrigin(Self.target("https://gis.example.com/")))
        #expect(store.credential(named: "svc5000")?.line == 5001)
    }
}

/// A small deterministic generator (SplitMix64), so a failure replays.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next(_ bound: Int) -> Int {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return Int((z ^ (z >> 31)) % UInt64(bound))
    }
}
