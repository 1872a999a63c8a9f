/// The pure parts of a `private_key_jwt` client assertion (RFC 7523 §3, OIDC Core §9): its header and claims as
/// JSON, the signing input, and the conversion of an ECDSA signature from OpenSSL's DER to JWS's fixed-size `r||s`.
/// Signing itself is ``JWTSigningKey``'s.
enum ClientAssertionJWT {
    /// How long an assertion is valid: long enough for clock skew, short enough that a copy is of little use.
    static let lifetimeSeconds: Int64 = 300

    /// `{"alg":…,"typ":"JWT"[,"kid":…][,"x5t#S256":…]}`: Entra ID identifies a certificate credential by its
    /// SHA-256 thumbprint (`x5t#S256`), other providers by `kid`.
    static func header(alg: OAuth2Settings.KeyAlgorithm, kid: String?, x5tS256: String?) -> String {
        var members = ["\"alg\":\(json(alg.rawValue))", "\"typ\":\"JWT\""]
        if let kid { members.append("\"kid\":\(json(kid))") }
        if let x5tS256 { members.append("\"x5t#S256\":\(json(x5tS256))") }
        return "{" + members.joined(separator: ",") + "}"
    }

    /// `iss` = `sub` = the client id, `aud` = the token endpoint the assertion is sent to, a random `jti` (the
    /// provider refuses a replayed one), `iat` and `exp` in seconds since the epoch.
    static func claims(clientID: String, audience: String, jti: String, issuedAt: Int64) -> String {
        "{\"iss\":\(json(clientID)),\"sub\":\(json(clientID)),\"aud\":\(json(audience)),\"jti\":\(json(jti)),"
            + "\"iat\":\(issuedAt),\"exp\":\(issuedAt + lifetimeSeconds)}"
    }

    /// `base64url(header).base64url(claims)`: the bytes that are signed.
    static func signingInput(header: String, claims: String) -> String {
        Base64URL.encode(header) + "." + Base64URL.encode(claims)
    }

    /// An ECDSA signature `SEQUENCE { INTEGER r, INTEGER s }` (DER, as OpenSSL makes it) as JWS wants it
    /// (RFC 7518 §3.4): `r` and `s` as unsigned big-endian integers of exactly `size` bytes each, concatenated.
    /// Nil when the DER is not such a sequence or an integer does not fit.
    static func rawECDSASignature(der: [UInt8], size: Int = 32) -> [UInt8]? {
        var i = 0
        func length() -> Int? {
            guard i < der.count else { return nil }
            let first = der[i]
            i += 1
            if first < 0x80 { return Int(first) }
            let n = Int(first & 0x7F)
            guard n >= 1, n <= 2, i + n <= der.count else { return nil }
            var l = 0
            for _ in 0..<n {
                l = l << 8 | Int(der[i])
                i += 1
            }
            return l
        }
        func integer() -> [UInt8]? {
            guard i < der.count, der[i] == 0x02 else { return nil }
            i += 1
            guard let l = length(), l > 0, i + l <= der.count else { return nil }
            var v = Array(der[i..<(i + l)])
            i += l
            while v.count > 1, v[0] == 0 { v.removeFirst() }  // the sign byte of a "negative-looking" value
            guard v.count <= size else { return nil }
            return [UInt8](repeating: 0, count: size - v.count) + v
        }
        guard der.first == 0x30 else { return nil }
        i = 1
        guard let total = length(), i + total == der.count, let r = integer(), let s = integer(), i == der.count
        else { return nil }
        return r + s
    }

    /// A JSON string literal.
    static func json(_ s: String) -> String { "\"" + jsonEscaped(s) + "\"" }
}
