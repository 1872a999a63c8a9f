/// The registered claims of a signed token, checked against an app's ``SignInPolicy`` at a time the caller passes
/// (seconds since 1970), so tests need no clock: `iss` exactly, `aud` naming an accepted audience, `exp` required
/// and `nbf` honoured, each with the configured clock skew. Returns why the token is refused, nil when it passes.
enum JWTClaimCheck {
    static func problem(_ claims: [String: Any], policy: SignInPolicy, now: Int64) -> String? {
        guard let iss = claims["iss"] as? String else { return "the token has no issuer (iss)" }
        guard iss == policy.issuer else { return "the token is from another issuer" }
        let aud: [String]
        if let one = claims["aud"] as? String {
            aud = [one]
        } else if let many = claims["aud"] as? [Any] {
            aud = many.compactMap { $0 as? String }
        } else {
            return "the token has no audience (aud)"
        }
        guard aud.contains(where: { policy.audiences.contains($0) }) else {
            return "the token is for another audience"
        }
        let skew = Int64(policy.clockSkewSeconds)
        guard let exp = seconds(claims["exp"]) else { return "the token has no expiry (exp)" }
        if now > exp + skew { return "the token expired" }
        if let nbf = seconds(claims["nbf"]), now + skew < nbf { return "the token is not valid yet (nbf)" }
        return nil
    }

    /// A NumericDate: an integer or a number with a fraction (RFC 7519 §2), truncated.
    static func seconds(_ v: Any?) -> Int64? {
        switch v {
        case let b as Bool: _ = b; return nil
        case let i as Int: return Int64(i)
        case let i as Int64: return i
        case let d as Double where d.isFinite && abs(d) < 1e15: return Int64(d)
        default: return nil
        }
    }
}
