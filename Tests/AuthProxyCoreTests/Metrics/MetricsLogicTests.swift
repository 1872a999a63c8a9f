import Testing

@testable import AuthProxyCore

/// The pure parts behind `/metrics` and the status page: the five-minute window, label values, the scheme that
/// answered a challenge.
@Suite struct MetricsLogicTests {
    @Test func activityWindowCountsTheLastFiveMinutesOnly() {
        var w = ActivityWindow()
        w.add(now: 0)
        w.add(2, now: 9_999)
        w.add(now: 10_000)
        #expect(w.total(now: 10_000) == 4)
        #expect(w.total(now: 299_999) == 4)  // the first bucket still overlaps the window
        #expect(w.total(now: 300_000) == 1)  // bucket 0 has left it
        #expect(w.total(now: 310_000) == 0)
        // A bucket reused a lap later starts from zero.
        w.add(now: 300_000)
        #expect(w.total(now: 300_000) == 2)
        #expect(w.total(now: 320_000) == 1)
    }

    @Test func activityWindowIgnoresBucketsFromTheFuture() {
        var w = ActivityWindow()
        w.add(now: 50_000)
        #expect(w.total(now: 40_000) == 0)
    }

    @Test func labelValuesAreAClosedSet() {
        #expect(MetricLabels.methodName(index: MetricLabels.methodIndex("GET")) == "GET")
        #expect(MetricLabels.methodName(index: MetricLabels.methodIndex("PROPFIND")) == "other")
        #expect(MetricLabels.methodName(index: MetricLabels.methodIndex("get")) == "other")
        #expect(MetricLabels.statusClass(200) == "2xx")
        #expect(MetricLabels.statusClass(499) == "4xx")
        #expect(MetricLabels.statusClass(0) == "none")
        #expect(MetricLabels.statusClass(999) == "none")
    }

    @Test func challengeSchemesAreParsedFromEveryHeaderAndChallenge() {
        let offered = NetworkAuthScheme.offered([
            "Negotiate, NTLM", "Digest realm=\"x\", qop=\"auth\", nonce=\"a,b\", Basic realm=\"y\"",
        ])
        #expect(offered == ["negotiate", "ntlm", "digest", "basic"])
        #expect(NetworkAuthScheme.offered(["Negotiate YIIB=="]) == ["negotiate"])
    }

    @Test func theAnsweringSchemeIsTheMostSecureTheCredentialCanUse() {
        var auth = NetworkAuth()
        auth.password = PasswordSettings(
            username: "u", password: "p", domain: nil, schemes: [.basic, .digest],
            allowBasicOverHTTP: false)
        #expect(
            NetworkAuthScheme.answered(offered: ["Basic realm=\"a\"", "Digest realm=\"a\""], auth: auth) == "digest")
        #expect(NetworkAuthScheme.answered(offered: ["NTLM"], auth: auth) == nil)
        auth.password?.schemes = [.ntlm, .basic]
        #expect(NetworkAuthScheme.answered(offered: ["Negotiate, NTLM", "Basic"], auth: auth) == "ntlm")
        auth.kerberos = KerberosSettings(principal: "a@B", keytab: "/k", password: nil)
        #expect(NetworkAuthScheme.answered(offered: ["Negotiate, NTLM"], auth: auth) == "negotiate")
    }

    @Test func credentialActivityKeepsOutcomesPerScheme() {
        var a = CredentialActivity()
        a.networkAuth(credential: "pw", scheme: "ntlm", success: true, now: 1)
        a.networkAuth(credential: "pw", scheme: "ntlm", success: false, now: 2)
        a.rateLimited(credential: "k", now: 3)
        let o = a.of("pw").networkAuth["ntlm"]
        #expect(o?.successes == 1 && o?.failures == 1 && o?.lastAt == 2 && o?.lastSucceeded == false)
        #expect(a.of("k").rateLimitedTotal == 1 && a.of("k").rateLimited.total(now: 3) == 1)
        #expect(a.of("unknown").requests.total(now: 3) == 0)
    }
}
