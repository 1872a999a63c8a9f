import Testing

@testable import AuthProxyCore

struct AzureSASAnswerTests {
    /// 2026-11-28T17:45:22Z in epoch milliseconds.
    let now: Int64 = 1_795_887_922_000
    let sas = "se=2026-11-28T18%3A45%3A22Z&sp=rl&sv=2024-11-04&sr=c&sig=Ab%2Bcd%3D"

    func classify(_ status: Int, _ json: String, date: Int64? = nil, key: Bool = false) -> AzureSASAnswer {
        AzureSASAnswer.classify(status: status, body: Array(json.utf8), serverDate: date, now: now, hasKey: key)
    }

    @Test func aTokenIsValidUntilMsftExpiry() {
        let a = classify(200, #"{"msft:expiry": "2026-11-28T18:45:22Z", "token": "\#(sas)"}"#)
        #expect(a == .token(IssuedToken(value: sas, expires: now + 3_600_000, issued: now, ssl: false, referer: nil)))
    }

    @Test func withoutMsftExpiryTheTokensOwnSeCounts() {
        let a = classify(200, #"{"token": "?\#(sas)"}"#)
        #expect(a == .token(IssuedToken(value: sas, expires: now + 3_600_000, issued: now, ssl: false, referer: nil)))
    }

    @Test func anExpiryWithoutZoneIsUTCAndFractionsAreRead() {
        #expect(AzureSASAnswer.expiry("2026-11-28T18:45:22") == now + 3_600_000)
        #expect(AzureSASAnswer.expiry("2026-11-28T18:45:22.5Z") == now + 3_600_500)
        #expect(AzureSASAnswer.expiry("2026-11-28T19:45:22+01:00") == now + 3_600_000)
        #expect(AzureSASAnswer.expiry("tomorrow") == nil)
    }

    @Test func aServerClockAheadOfOursKeepsTheLifetimeItMeant() {
        // The endpoint's clock is 10 minutes ahead: its msft:expiry is an hour after its Date, and so is ours.
        let a = classify(
            200, #"{"msft:expiry": "2026-11-28T18:55:22Z", "token": "\#(sas)"}"#, date: now + 600_000)
        guard case .token(let t) = a else {
            Issue.record("no token: \(a)")
            return
        }
        #expect(t.expires == now + 3_600_000 - 1000)
    }

    @Test func aTokenAlreadyExpiredOnTheEndpointsClockIsAnOutage() {
        let a = classify(200, #"{"msft:expiry": "2026-11-28T17:45:22Z", "token": "\#(sas)"}"#)
        #expect(a == .outage("answered a token that expires in under a second (check msft:expiry and the clocks)"))
    }

    @Test func answersWithoutAUsableTokenAreOutages() {
        #expect(classify(200, "") == .outage("answered HTTP 200 without a JSON object"))
        #expect(classify(200, "<html/>") == .outage("answered HTTP 200 without a JSON object"))
        #expect(
            classify(200, #"{"msft:expiry": "2026-11-28T18:45:22Z"}"#) == .outage("answered HTTP 200 without a token"))
        #expect(classify(200, #"{"token": "sp=rl&sig=x"}"#) == .outage("answered a token without msft:expiry or se"))
        let injected = classify(200, #"{"msft:expiry": "2026-11-28T18:45:22Z", "token": "sig=x\r\nX-Evil: 1"}"#)
        guard case .outage(let why) = injected else {
            Issue.record("a token with CR LF was taken")
            return
        }
        #expect(why.contains("cannot be sent") && !why.contains("X-Evil"))
    }

    @Test func keyRefusalsSayWhetherAKeyWasSent() {
        let apim = #"{"statusCode": 401, "message": "Access denied due to invalid subscription key."}"#
        #expect(
            classify(401, apim, key: true)
                == .keyRefused(
                    "refused the subscription key (HTTP 401: Access denied due to invalid subscription key.)"))
        #expect(
            classify(403, "", key: false) == .keyRefused("wants a subscription key (HTTP 403): set subscription_key"))
    }

    @Test func anUnknownCollectionIsARefusalOfThatScope() {
        #expect(
            classify(404, #"{"detail": "Collection not found: nope"}"#)
                == .refused("refused to sign for it (HTTP 404: Collection not found: nope)"))
        #expect(classify(422, "{}") == .refused("refused to sign for it (HTTP 422)"))
    }

    @Test func rateLimitsAndServerErrorsAreOutagesWithWhatTheySaid() {
        #expect(
            classify(429, #"{"detail": "Rate limit exceeded"}"#) == .outage("answered HTTP 429: Rate limit exceeded"))
        #expect(classify(502, "Bad Gateway") == .outage("answered HTTP 502"))
        let long = String(repeating: "x", count: 500)
        #expect(
            classify(500, #"{"detail": "\#(long)\u0007"}"#)
                == .outage("answered HTTP 500: " + String(repeating: "x", count: 200)))
    }
}
