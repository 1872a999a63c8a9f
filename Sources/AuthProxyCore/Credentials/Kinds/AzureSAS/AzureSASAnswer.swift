import Foundation

/// What a SAS token endpoint's answer means, decided from its status, body and `Date` without I/O.
///
/// - 200 with a JSON object `{"msft:expiry": "2026-11-28T18:45:22Z", "token": "se=…&sp=rl&…&sig=…"}` is a token,
///   valid until `msft:expiry` (RFC 3339; without one, the token's own `se`), laid onto the local clock through the
///   answer's `Date` (``ServerClock``) as the blob store will judge it by its own clock.
/// - 401 and 403 refuse the subscription key (Azure API Management answers so for a missing or wrong
///   `Ocp-Apim-Subscription-Key`): the whole credential backs off, whatever container asked.
/// - 400, 404 and 422 refuse this container or collection (an id the endpoint does not know): only that scope does.
/// - Anything else — 429, 5xx, a body that is not the object above, a token a URL cannot carry, one already expired —
///   is an outage: backoff and retry.
enum AzureSASAnswer: Equatable {
    case token(IssuedToken)
    /// The endpoint refused the credential's subscription key, or wants one.
    case keyRefused(String)
    /// The endpoint refused to sign for this container or collection.
    case refused(String)
    /// No usable answer; says what came back.
    case outage(String)

    /// The answer `body` with HTTP `status`, dated `serverDate` (its `Date`, nil when absent), received at `now`
    /// (milliseconds since the epoch); `hasKey`: whether a subscription key was sent.
    static func classify(status: Int, body: [UInt8], serverDate: Int64?, now: Int64, hasKey: Bool) -> AzureSASAnswer {
        let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any]
        let said = object.flatMap(detail).map { ": \($0)" } ?? ""
        switch status {
        case 200:
            break
        case 401, 403:
            return .keyRefused(
                hasKey
                    ? "refused the subscription key (HTTP \(status)\(said))"
                    : "wants a subscription key (HTTP \(status)\(said)): set subscription_key")
        case 400, 404, 422:
            return .refused("refused to sign for it (HTTP \(status)\(said))")
        default:
            return .outage("answered HTTP \(status)\(said)")
        }
        guard let object else { return .outage("answered HTTP 200 without a JSON object") }
        guard let raw = object["token"] as? String, !raw.isEmpty else {
            return .outage("answered HTTP 200 without a token")
        }
        let token = AzureSASQuery.normalized(raw)
        if let why = AzureSASQuery.problem(token) { return .outage("answered a token that cannot be sent: \(why)") }
        let stated = (object["msft:expiry"] as? String).flatMap(expiry)
        guard let expires = stated ?? AzureSASQuery.decodedValue(of: "se", in: token).flatMap(expiry) else {
            return .outage("answered a token without msft:expiry or se")
        }
        // The blob store judges `se` by its clock, the endpoint's: a token already expired there is no token.
        let lifetime = expires - (serverDate ?? now)
        guard lifetime >= 1000 else {
            return .outage("answered a token that expires in under a second (check msft:expiry and the clocks)")
        }
        let local = ServerClock.localExpiry(expires: expires, serverDate: serverDate, now: now)
        return .token(IssuedToken(value: token, expires: local, issued: now, ssl: false, referer: nil))
    }

    /// An RFC 3339 date-time in epoch milliseconds; one without a zone (`2026-11-28T18:45:22`, as Python's
    /// `isoformat()` writes a naive time) is UTC.
    static func expiry(_ text: String) -> Int64? {
        if let t = parseRFC3339(text) { return t }
        return parseRFC3339(text + "Z")
    }

    /// What an error body says: FastAPI's `detail` (the Planetary Computer API) or API Management's `message`,
    /// cut to 200 printable ASCII characters.
    private static func detail(_ object: [String: Any]) -> String? {
        guard let text = (object["detail"] as? String) ?? (object["message"] as? String) else { return nil }
        let printable = String(
            String.UnicodeScalarView(text.unicodeScalars.filter { (0x20...0x7E).contains($0.value) }))
        return printable.isEmpty ? nil : String(printable.prefix(200))
    }
}
