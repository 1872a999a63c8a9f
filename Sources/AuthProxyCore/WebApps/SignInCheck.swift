/// What `/proxy` does with a request of an app that requires sign-in (``SignInPolicy``), decided from the
/// `Authorization` field, the issuer's keys as cached, and the time (seconds since 1970): no I/O, so every case is
/// a unit test.
enum SignInVerdict: Equatable {
    /// The token verifies: the first matching rule's credentials (its index), or with nil the app's own.
    case admitted(rule: Int?)
    /// No bearer token at all: 401 without an error code (RFC 6750 §3.1), so the app knows to sign the user in.
    case missing
    /// A token that does not pass: 401 `error="invalid_token"` with this description (safe to show: it never
    /// repeats the token or a claim's value).
    case refused(String)
    /// The cached keys have none for this token's `kid` (or there are none yet): fetch the JWKS, then decide
    /// again with `afterFetch`.
    case needKeys
}

enum SignInCheck {
    static let acceptedAlgorithms: Set<String> = ["RS256", "PS256", "ES256"]

    /// `keys`: the issuer's verifiers as last fetched (nil: never fetched successfully). `afterFetch`: the keys
    /// were (re)fetched for this request, so a token whose `kid` is still unknown is refused rather than fetched
    /// for again.
    static func verdict(
        authorization: String?, policy: SignInPolicy, keys: [JWSVerifier]?, afterFetch: Bool, now: Int64
    ) -> SignInVerdict {
        guard let authorization else { return .missing }
        let (scheme, token) = authorization.authorizationScheme()
        guard scheme.caseInsensitiveEquals("bearer") else {
            return .refused("send the user's token as Authorization: Bearer <token>")
        }
        guard !token.isEmpty else { return .missing }
        let jwt: JWT
        do { jwt = try JWT.parse(token) } catch { return .refused(error.reason) }
        guard acceptedAlgorithms.contains(jwt.alg) else {
            return .refused("the token's algorithm is not accepted (RS256, PS256 or ES256 only)")
        }
        // The claims first: a token of another issuer or audience, or an expired one, never costs a key fetch.
        if let problem = JWTClaimCheck.problem(jwt.claims, policy: policy, now: now) { return .refused(problem) }
        let candidates = (keys ?? []).filter { $0.jwk.verifies(jwt.alg) && (jwt.kid == nil || $0.jwk.kid == jwt.kid) }
        if candidates.isEmpty {
            if !afterFetch { return .needKeys }
            return .refused(
                keys == nil
                    ? "the issuer's signing keys are not available" : "no signing key of the issuer has the token's kid"
            )
        }
        guard candidates.contains(where: { $0.verify(alg: jwt.alg, input: jwt.signingInput, signature: jwt.signature) })
        else { return .refused("the token's signature does not verify") }
        return .admitted(rule: UserRule.firstMatch(policy.rules, jwt.claims))
    }

    /// The `WWW-Authenticate` value for a 401 (RFC 6750 §3): the description is restricted to the characters the
    /// RFC allows in it.
    static func challenge(_ verdict: SignInVerdict) -> String {
        guard case .refused(let why) = verdict else { return "Bearer realm=\"authproxy\"" }
        let safe = String(
            why.unicodeScalars.filter {
                $0 == " " || $0 == "!" || ($0.value >= 0x23 && $0.value <= 0x5B)
                    || ($0.value >= 0x5D && $0.value <= 0x7E)
            })
        return "Bearer realm=\"authproxy\", error=\"invalid_token\", error_description=\"\(safe)\""
    }
}
