import Testing

@testable import AuthProxyCore

/// ``RootConfirmations`` on a fake clock: which roots a client's path names may have a password
/// spent on them, with the probe budget, the remembered refusals and the cap.
@Suite struct RootConfirmationsTests {
    typealias Confirmations = RootConfirmations<String>

    static func key(_ i: Int) -> String { "gis|http://gis.example.com/arcgis/invented\(i)" }

    @Test func configuredRootsNeedNoProbeAndAreNeverCounted() {
        var c = Confirmations(limits: .init(maxRoots: 1, probeBurst: 1))
        for i in 0..<100 {
            #expect(c.check(credential: "gis", key: Self.key(i), configured: true, now: 0, waiter: "r") == .confirmed)
        }
        #expect(!c.holds(credential: "gis"))
    }

    @Test func aProbedRootIsConfirmedOnceAndWaitersShareTheProbe() {
        var c = Confirmations()
        let k = "gis|http://gis.example.com/other"
        #expect(c.check(credential: "gis", key: k, configured: false, now: 0, waiter: "a") == .probe)
        #expect(c.check(credential: "gis", key: k, configured: false, now: 1, waiter: "b") == .wait)
        let s = c.settle(credential: "gis", key: k, verdict: .root, now: 2)
        #expect(s.decision == .confirmed && s.waiters == ["a", "b"])
        // From then on without a probe.
        #expect(c.check(credential: "gis", key: k, configured: false, now: 3, waiter: "c") == .confirmed)
        #expect(c.confirmedCount(credential: "gis") == 1)
    }

    @Test func aNegativeAnswerIsRememberedUntilItExpires() {
        var c = Confirmations()
        let k = Self.key(1)
        #expect(c.check(credential: "gis", key: k, configured: false, now: 0, waiter: "a") == .probe)
        let s = c.settle(credential: "gis", key: k, verdict: .notARoot(reason: "HTTP 404"), now: 10)
        let until = 10 + c.limits.refusedLifetime
        #expect(s.decision == .refused(.notARoot(reason: "HTTP 404", retryAt: until)) && s.waiters == ["a"])
        // Asked again: refused at once, no probe.
        #expect(
            c.check(credential: "gis", key: k, configured: false, now: until - 1, waiter: "b")
                == .refused(.notARoot(reason: "HTTP 404", retryAt: until)))
        // Expired: probed again.
        #expect(c.check(credential: "gis", key: k, configured: false, now: until, waiter: "c") == .probe)
    }

    @Test func noAnswerIsRememberedOnlyBriefly() {
        var c = Confirmations()
        let k = Self.key(1)
        _ = c.check(credential: "gis", key: k, configured: false, now: 0, waiter: "a")
        let s = c.settle(credential: "gis", key: k, verdict: .unreachable(reason: "timeout"), now: 0)
        #expect(s.decision == .refused(.notARoot(reason: "timeout", retryAt: c.limits.unreachableLifetime)))
        #expect(
            c.check(credential: "gis", key: k, configured: false, now: c.limits.unreachableLifetime, waiter: "b")
                == .probe)
    }

    @Test func probesAreBudgetedPerCredential() {
        var c = Confirmations()
        let burst = c.limits.probeBurst
        for i in 0..<burst {
            #expect(c.check(credential: "gis", key: Self.key(i), configured: false, now: 0, waiter: "r") == .probe)
            _ = c.settle(credential: "gis", key: Self.key(i), verdict: .notARoot(reason: "404"), now: 0)
        }
        // 1,000 more invented roots at once: not one more probe.
        for i in burst..<(burst + 1000) {
            #expect(
                c.check(credential: "gis", key: Self.key(i), configured: false, now: 1, waiter: "r")
                    == .refused(.probeBudget(retryAt: c.limits.probeRefill)))
        }
        // Another credential has its own budget.
        #expect(c.check(credential: "other", key: Self.key(0), configured: false, now: 1, waiter: "r") == .probe)
        // One probe more per refill interval.
        #expect(
            c.check(credential: "gis", key: Self.key(5000), configured: false, now: c.limits.probeRefill, waiter: "r")
                == .probe)
        #expect(
            c.check(credential: "gis", key: Self.key(5001), configured: false, now: c.limits.probeRefill, waiter: "r")
                == .refused(.probeBudget(retryAt: 2 * c.limits.probeRefill)))
        // Idle long enough, the whole burst is back (never more).
        var probes = 0
        for i in 6000..<6100 {
            if c.check(credential: "gis", key: Self.key(i), configured: false, now: 3_600_000, waiter: "r") == .probe {
                probes += 1
            }
        }
        #expect(probes == burst)
    }

    @Test func rememberedRefusalsAreBounded() {
        var c = Confirmations(limits: .init(maxRefused: 8, probeBurst: 1000))
        for i in 0..<100 {
            #expect(
                c.check(credential: "gis", key: Self.key(i), configured: false, now: Int64(i), waiter: "r") == .probe)
            _ = c.settle(credential: "gis", key: Self.key(i), verdict: .notARoot(reason: "404"), now: Int64(i))
        }
        #expect(c.refusedCount(credential: "gis") == 8)
        // The newest are the ones kept.
        #expect(
            c.check(credential: "gis", key: Self.key(99), configured: false, now: 100, waiter: "r")
                == .refused(.notARoot(reason: "404", retryAt: 99 + c.limits.refusedLifetime)))
    }

    @Test func probedRootsAreCappedWithAClearRefusal() {
        var c = Confirmations(limits: .init(maxRoots: 3, probeBurst: 100))
        for i in 0..<3 {
            #expect(c.check(credential: "gis", key: Self.key(i), configured: false, now: 0, waiter: "r") == .probe)
            #expect(c.settle(credential: "gis", key: Self.key(i), verdict: .root, now: 0).decision == .confirmed)
        }
        // A fourth real root is refused without a probe; confirmed ones and configured ones keep working.
        #expect(
            c.check(credential: "gis", key: Self.key(3), configured: false, now: 1, waiter: "r")
                == .refused(.tooManyRoots(limit: 3)))
        #expect(c.check(credential: "gis", key: Self.key(0), configured: false, now: 1, waiter: "r") == .confirmed)
        #expect(c.check(credential: "gis", key: Self.key(9), configured: true, now: 1, waiter: "r") == .confirmed)
        #expect(c.confirmedCount(credential: "gis") == 3)
    }

    @Test func probesInFlightCountAgainstTheCap() {
        var c = Confirmations(limits: .init(maxRoots: 2, probeBurst: 100))
        #expect(c.check(credential: "gis", key: Self.key(0), configured: false, now: 0, waiter: "a") == .probe)
        #expect(c.check(credential: "gis", key: Self.key(1), configured: false, now: 0, waiter: "b") == .probe)
        #expect(
            c.check(credential: "gis", key: Self.key(2), configured: false, now: 0, waiter: "c")
                == .refused(.tooManyRoots(limit: 2)))
    }

    @Test func forgettingACredentialKeepsRunningProbesForTheirWaiters() {
        var c = Confirmations()
        #expect(c.check(credential: "gis", key: Self.key(0), configured: false, now: 0, waiter: "a") == .probe)
        _ = c.check(credential: "gis", key: Self.key(1), configured: false, now: 0, waiter: "b")
        #expect(c.settle(credential: "gis", key: Self.key(1), verdict: .root, now: 0).decision == .confirmed)
        c.forget(credential: "gis")
        #expect(c.confirmedCount(credential: "gis") == 0)
        let s = c.settle(credential: "gis", key: Self.key(0), verdict: .notARoot(reason: "404"), now: 1)
        #expect(s.waiters == ["a"])
        c.forget(credential: "gis")
        c.forget(credential: "gis")
        #expect(c.refusedCount(credential: "gis") == 0)
    }

    // MARK: - the roots configuration names

    func credential(_ body: String) throws -> Credential { try TokenTestSupport.credential(body) }

    func key(_ c: Credential, _ url: String) throws -> String { TokenTestSupport.key(c, url) }

    @Test func matchPrefixesAndTokenURLNameConfiguredRoots() throws {
        let c = try credential(
            """
            [[credential]]
            name = "gis"
            type = "arcgis-token"
            username = "u"
            password = "p"
            token_url = "https://login.example.com/portal/sharing/rest/generateToken"
            match = ["https://gis.example.com/arcgis", "https://gis.example.com/server/rest/services/Folder", "https://*.example.org"]
            """)
        let keys = TokenService.configuredRootKeys(c)
        for url in [
            "https://gis.example.com/arcgis/rest/services/A/MapServer?f=json",
            "https://GIS.example.com:443/arcgis/tokens/generateToken",
            "https://gis.example.com/arcgis/sharing/rest/info",
            "https://gis.example.com/server/rest/services/Folder/B/FeatureServer/0/query",
            "https://login.example.com/portal/sharing/rest/portals/self",
        ] {
            #expect(keys.contains(try key(c, url)), "\(url)")
        }
        // Roots a client's path invents under a prefix are not configured: they must be confirmed.
        for url in [
            "https://gis.example.com/arcgis/invented/rest/services/A/MapServer",
            "https://gis.example.com/arcgis/x/sharing/rest/portals/self",
            "https://gis.example.com/rest/services",
            "https://a.example.org/arcgis/rest/services",
            "https://login.example.com/portal/rest/services",
        ] {
            #expect(!keys.contains(try key(c, url)), "\(url)")
        }
    }

    @Test func anOAuthPortalAndUpgradedPrefixesAreConfigured() throws {
        let c = try credential(
            """
            [[credential]]
            name = "app"
            type = "oauth-app"
            client_id = "id"
            client_secret = "secret"
            portal_url = "https://portal.example.com/portal"
            match = ["http://gis.example.com/arcgis"]
            upgrade_to_https = true
            """)
        let keys = TokenService.configuredRootKeys(c)
        #expect(keys.contains(try key(c, "https://portal.example.com/portal/sharing/rest/portals/self")))
        #expect(keys.contains(try key(c, "http://gis.example.com/arcgis/rest/services")))
        // Tokens are requested for the https URL the request is upgraded to.
        #expect(keys.contains(try key(c, "https://gis.example.com/arcgis/rest/services")))
        #expect(!keys.contains(try key(c, "https://portal.example.com/portal/other/sharing/rest/portals/self")))
    }
}
