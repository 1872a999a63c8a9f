import Testing

@testable import AuthProxyCore

@Suite struct ParentProxyTests {
    @Test(arguments: [
        ("http://proxy.corp.example:8080", "http://proxy.corp.example:8080"),
        ("HTTP://Proxy.Corp.Example:8080/", "http://proxy.corp.example:8080"),
        ("https://proxy.corp.example", "https://proxy.corp.example:443"),
        ("socks5h://127.0.0.1:1080", "socks5h://127.0.0.1:1080"),
        ("http://[::1]:3128", "http://[::1]:3128"),
    ])
    func parses(_ text: String, _ url: String) {
        #expect(ParentProxy.parse(text)?.url == url)
    }

    @Test(arguments: [
        "proxy.corp.example:8080",  // no scheme
        "http://proxy.corp.example",  // http needs a port
        "ftp://proxy:21",  // not a proxy scheme
        "http://user:pw@proxy:8080",  // the password belongs in a credential
        "http://proxy:8080/path",  // no path
        "http://proxy:8080?x=1",
        "http://*.corp:8080",
        "http://:8080",
    ])
    func refuses(_ text: String) {
        #expect(ParentProxy.parse(text) == nil, "\(text)")
    }
}

/// The failover policy, with times passed in.
@Suite struct ParentFailoverTests {
    let a = ParentProxy(scheme: .http, host: "a", port: 1)
    let b = ParentProxy(scheme: .http, host: "b", port: 2)
    let c = ParentProxy(scheme: .http, host: "c", port: 3)

    @Test func configuredOrderWhileAllAreWell() {
        let f = ParentFailover(backoffSeconds: 30)
        #expect(f.order([a, b, c], now: 0) == [a, b, c])
    }

    @Test func aFailedParentGoesLastUntilItsBackoffEnds() {
        var f = ParentFailover(backoffSeconds: 30)
        f.failed(a, cause: .connect, now: 1000)
        #expect(f.order([a, b, c], now: 2000) == [b, c, a])
        #expect(f.inBackoff(a, now: 30_999))
        // Probed again once the backoff is over: first in line again.
        #expect(f.order([a, b, c], now: 31_000) == [a, b, c])
        #expect(!f.inBackoff(a, now: 31_000))
    }

    @Test func allInBackoffAreStillTriedEarliestExpiryFirst() {
        var f = ParentFailover(backoffSeconds: 10)
        f.failed(b, cause: .timeout, now: 0)
        f.failed(a, cause: .auth, now: 5000)
        #expect(f.order([a, b], now: 6000) == [b, a])
    }

    @Test func aRefusedConnectIsAboutTheDestinationNotTheParent() {
        var f = ParentFailover(backoffSeconds: 10)
        f.failed(a, cause: .refused, now: 0)
        #expect(!f.inBackoff(a, now: 1))
        #expect(!ParentFailover.backsOff(.refused))
        #expect(ParentFailover.backsOff(.auth))
    }

    @Test func successEndsTheBackoff() {
        var f = ParentFailover(backoffSeconds: 10)
        f.failed(a, cause: .connect, now: 0)
        f.succeeded(a)
        #expect(f.order([a, b], now: 1) == [a, b])
    }

    @Test func healthCountsAndOrdersWithItsClock() {
        final class Clock: @unchecked Sendable { var t: UInt64 = 0 }
        let clock = Clock()
        let h = ParentHealth(backoffSeconds: 5, now: { clock.t })
        h.attempted(a)
        h.failed(a, cause: .connect)
        h.attempted(b)
        h.succeeded(b)
        #expect(h.order([a, b]) == [b, a])
        clock.t = 5000
        #expect(h.order([a, b]) == [a, b])
        let s = h.snapshot(configured: [a, b])
        #expect(s.map(\.stats.requests) == [1, 1])
        #expect(s[0].stats.failures[.connect] == 1)
        let text = ParentMetricsText.render(s)
        #expect(text.contains("authproxy_parent_requests_total{parent=\"http://a:1\"} 1\n"))
        #expect(text.contains("authproxy_parent_failures_total{cause=\"connect\",parent=\"http://a:1\"} 1\n"))
        #expect(text.contains("authproxy_parent_failures_total{cause=\"auth\",parent=\"http://b:2\"} 0\n"))
        #expect(text.contains("authproxy_parent_backoff{parent=\"http://a:1\"} 0\n"))
    }
}
