import Foundation

/// What an OAuth 2.0 token endpoint's answer means (RFC 6749 §5.1, §5.2), decided from its status, body and the
/// time, without I/O.
///
/// - A JSON object with an `access_token` (and a `token_type` of Bearer, or RFC 8693's `N_A`, when it names one) is a
///   token. Its lifetime is `expires_in`, else the `exp` of the access token when it is a JWT (read, not verified:
///   the proxy is not its audience), else `default_lifetime_seconds`.
/// - With `token_field = "id_token"` the `id_token` is the token (Google's jwt-bearer answer has nothing else), and
///   its lifetime is its own `exp` first: an `expires_in` beside it is the access token's.
/// - An `error` of `invalid_client`, `unauthorized_client`, `invalid_scope`, `invalid_grant`, `invalid_request` or
///   `unsupported_grant_type` is a refusal of the configuration: the client gets a 502 with the error and its
///   description, and the credential backs off (a provider must not be hammered with a secret it refused).
/// - Anything else — a 5xx, a 429, an empty or non-JSON body (even with 200: envoy #42009 made that fatal), another
///   error code, no access token, an access token that is not an RFC 6750 `b64token` (``TokenSyntax``) — is an
///   outage: backoff and retry.
enum OAuth2TokenAnswer: Equatable {
    case token(IssuedToken, refreshToken: String?)
    /// The provider refused the credential's request; `error` is the RFC 6749 code.
    case refused(error: String, description: String?)
    /// No usable answer; `why` says what came back.
    case outage(why: String)

    static let configurationErrors: Set<String> = [
        "invalid_client", "unauthorized_client", "invalid_scope", "invalid_grant", "invalid_request",
        "unsupported_grant_type", "invalid_target",
    ]

    /// The answer `body` with HTTP `status`, received at `now` (milliseconds since the epoch).
    static func classify(
        status: Int, body: [UInt8], now: Int64, defaultLifetimeSeconds: Int,
        field: OAuth2Settings.TokenField = .accessToken
    ) -> OAuth2TokenAnswer {
        let trimmed = body.drop { $0 == 32 || $0 == 9 || $0 == 10 || $0 == 13 }
        guard !trimmed.isEmpty else { return .outage(why: "HTTP \(status) with an empty body") }
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] else {
            return .outage(why: "HTTP \(status) without a JSON object")
        }
        if let error = object["error"] as? String {
            let description = object["error_description"] as? String
            if configurationErrors.contains(error), status < 500, status != 429 {
                return .refused(error: error, description: description)
            }
            return .outage(why: "HTTP \(status), error \(error)\(description.map { " (\($0))" } ?? "")")
        }
        guard (200..<300).contains(status) else { return .outage(why: "HTTP \(status)") }
        let name = field.rawValue
        guard let token = object[name] as? String, !token.isEmpty else {
            return .outage(why: "HTTP \(status) without an \(name)")
        }
        // Written into `Authorization: Bearer` as it is: a token that is not a b64token is no token.
        if let why = TokenSyntax.bearerProblem(token) {
            return .outage(why: "an \(name) that cannot be sent: \(why)")
        }
        // `N_A`: an RFC 8693 exchange issued a token that is not an OAuth access token (requested_token_type jwt or
        // id_token); it is still what the credential asked for. The token_type describes the access token only.
        if field == .accessToken, let type = object["token_type"] as? String, type.lowercased() != "bearer",
            type != "N_A"
        {
            return .refused(
                error: "unsupported_token_type",
                description: "the token_type is \(type); only Bearer tokens can be sent")
        }
        let lifetime: Int64
        if field == .idToken, let exp = jwtExpiry(token) {
            lifetime = exp * 1000 - now
        } else if let seconds = number(object["expires_in"]) {
            lifetime = seconds * 1000
        } else if let exp = jwtExpiry(token) {
            lifetime = exp * 1000 - now
        } else {
            lifetime = Int64(defaultLifetimeSeconds) * 1000
        }
        // A token already expired on arrival (expires_in 0, or a JWT exp behind this clock) would be asked for
        // again by every request: it is an outage, with backoff, and the message points at the clocks.
        guard lifetime >= 1000 else {
            return .outage(why: "an access token that expires in under a second (check expires_in and the clocks)")
        }
        let refresh = (object["refresh_token"] as? String).flatMap { $0.isEmpty ? nil : $0 }
        return .token(
            IssuedToken(value: token, expires: now + lifetime, issued: now, ssl: false, referer: nil),
            refreshToken: refresh)
    }

    /// `expires_in` as a number (or the numeric string some providers send), whole seconds; nil otherwise.
    static func number(_ v: Any?) -> Int64? {
        if let n = v as? NSNumber { return Int64(exactly: n.doubleValue.rounded(.towardZero)) }
        if let s = v as? String, let n = Int64(s) { return n }
        return nil
    }

    /// The `exp` claim (seconds since the epoch) of a JWT, read without verifying it; nil for an opaque token (or an encrypted one).
    static func jwtExpiry(_ token: String) -> Int64? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let payload = Base64URL.decode(parts[1]),
            let claims = try? JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any]
        else { return nil }
        return number(claims["exp"])
    }
}
