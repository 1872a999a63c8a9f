import Testing

@testable import AuthProxyCore

/// `no_proxy` as the README states it, over ``NoProxyList``: no name is ever resolved.
@Suite struct NoProxyListTests {
    static let list: NoProxyList = {
        guard
            case .success(let l) = NoProxyList.parse([
                "intranet", ".corp.example", "*.wild.example", "plain.example", "gis.example:8443", "10.0.0.0/8",
                "192.168.1.5", "[fd00::1]", "fd00:1::/32", "<local>",
            ])
        else { fatalError("list does not parse") }
        return l
    }()

    @Test(arguments: [
        // exact dotless host, and <local> for any dotless name
        ("intranet", 80, true), ("INTRANET", 80, true), ("other", 443, true),
        // domains in every spelling cover the domain and its subdomains
        ("corp.example", 443, true), ("a.b.corp.example", 80, true), ("xcorp.example", 80, false),
        ("wild.example", 80, true), ("x.wild.example", 443, true),
        ("plain.example", 80, true), ("sub.plain.example", 80, true), ("plain.example.org", 80, false),
        // case and a trailing dot do not matter
        ("Sub.Corp.Example.", 80, true),
        // host:port is that port only
        ("gis.example", 8443, true), ("gis.example", 443, false),
        // address blocks apply to IP literals only
        ("10.1.2.3", 80, true), ("11.1.2.3", 80, false), ("192.168.1.5", 80, true), ("192.168.1.6", 80, false),
        ("fd00::1", 443, true), ("fd00:1::5", 443, true), ("fd00:2::5", 443, false),
        // anything else goes through the parent
        ("gis.example.org", 443, false), ("arcgis.com", 443, false),
    ])
    func bypasses(_ host: String, _ port: Int, _ expected: Bool) {
        #expect(Self.list.bypasses(host: host, port: port) == expected, "\(host):\(port)")
    }

    @Test func starBypassesEverything() throws {
        let l = try NoProxyList.parse(["*"]).get()
        #expect(l.bypasses(host: "anything.example", port: 443))
        #expect(l.bypasses(host: "10.0.0.1", port: 80))
    }

    @Test func emptyListBypassesNothing() {
        #expect(!NoProxyList().bypasses(host: "localhost", port: 80))
    }

    @Test(arguments: ["", "a b", "10.0.0.0/40", "*.", "host:99999", "*foo.example"])
    func badEntriesAreNamed(_ entry: String) {
        guard case .failure(let e) = NoProxyList.parse(["ok.example", entry]) else {
            Issue.record("\(entry) parsed")
            return
        }
        #expect(e.entry == entry)
    }
}
