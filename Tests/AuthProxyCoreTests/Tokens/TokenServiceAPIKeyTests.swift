import Logging
import Testing

@testable import AuthProxyCore

/// The token service carrying out ``APIKeySlotBook``'s decisions for `api-key` credentials: which key a request gets,
/// what the executor does after a rejection, and what a reload keeps.
struct TokenServiceAPIKeyTests {
    let day: Int64 = 86_400_000

    func credential(_ slots: [APIKeySettings.Slot], referer: String? = nil) -> Credential {
        Credential(
            name: "keys", kind: .apiKey(APIKeySettings(slots: slots, referer: referer)),
            match: [MatchPrefix.parse("https://h")!], placement: .param, overrideClientToken: false, line: 1)
    }

    var two: [APIKeySettings.Slot] {
        [.init(number: 1, key: "K1", expires: 100 * day), .init(number: 2, key: "K2", expires: 200 * day)]
    }

    @Test func aRejectedKeyIsReplacedOnceThenTheClientGetsAClearError() throws {
        let clock = FakeClock(10 * day)
        let c = credential(two, referer: "https://app.example.com/")
        let s = TokenSchedulingTests.service(c, clock: clock)
        let target = try TokenSchedulingTests.target("https://h/arcgis/rest/services/x")
        let first = try #require(s.cachedToken(for: c, target: target))
        #expect(first.value == "K1" && first.referer == "https://app.example.com/" && first.expires == 100 * day)
        // The other slot, replayed: the executor's refresh-and-retry path.
        #expect(s.rejected(c, target: target, token: first, attempt: 1, replayImpossible: nil) == .refreshAndRetry)
        clock.advance(1)
        let second = try #require(s.cachedToken(for: c, target: target))
        #expect(second.value == "K2")
        #expect(s.apiKeySlotStates(c).map(\.state) == [.rejected, .inUse])
        // A body that cannot be replayed: the upstream's answer goes to the client, the switch stays.
        #expect(
            s.rejected(c, target: target, token: first, attempt: 1, replayImpossible: "too large")
                == .relay(reason: "too large", serverRejectsNewTokens: false))
        // The other slot rejected too: a 502 naming the credential and both slots, never a key.
        clock.advance(1)
        guard case .answer(let e) = s.rejected(c, target: target, token: second, attempt: 2, replayImpossible: nil)
        else {
            Issue.record("no clear error")
            return
        }
        #expect(e.status == 502 && e.message.contains("'keys'") && e.message.contains("both of its API keys"))
        #expect(!(e.message + e.details.joined()).contains("K1") && !(e.message + e.details.joined()).contains("K2"))
        #expect(s.apiKeySlotStates(c).map(\.state) == [.rejected, .rejected])
    }

    @Test func anExpiredKeyIsNeverHandedOut() throws {
        let clock = FakeClock(150 * day)
        let c = credential(two)
        let s = TokenSchedulingTests.service(c, clock: clock)
        let target = try TokenSchedulingTests.target("https://h/x")
        #expect(s.cachedToken(for: c, target: target)?.value == "K2")
        #expect(s.apiKeySlotStates(c).map(\.state) == [.expired, .inUse])
        clock.advance(100 * day)
        #expect(s.cachedToken(for: c, target: target) == nil)
        nonisolated(unsafe) var failure: TokenError? = nil
        s.token(for: c, target: target) { if case .failure(let e) = $0 { failure = e } }
        #expect(failure?.message.contains("expired") == true && failure?.local == true)
    }

    @Test func aReloadThatChangesTheKeyBringsTheSlotBack() throws {
        let clock = FakeClock(10 * day)
        let c = credential(two)
        let s = TokenSchedulingTests.service(c, clock: clock)
        let target = try TokenSchedulingTests.target("https://h/x")
        let first = try #require(s.cachedToken(for: c, target: target))
        _ = s.rejected(c, target: target, token: first, attempt: 1, replayImpossible: nil)
        // The same keys again: slot 1 stays off.
        s.update(credentials: [c])
        #expect(s.cachedToken(for: c, target: target)?.value == "K2")
        var slots = two
        slots[0].key = "K1-new"
        let rotated = credential(slots)
        s.update(credentials: [rotated])
        #expect(s.cachedToken(for: rotated, target: target)?.value == "K1-new")
    }
}
