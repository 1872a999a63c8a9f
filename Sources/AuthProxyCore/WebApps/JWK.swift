import Foundation

/// One public key of a JWKS (RFC 7517), as the verifier needs it: RSA (`n`, `e`) or EC P-256 (`x`, `y`). Other
/// keys (encryption keys, other curves, symmetric keys) are skipped when the set is read.
struct JWK: Equatable {
    enum Material: Equatable {
        case rsa(n: [UInt8], e: [UInt8])
        case p256(x: [UInt8], y: [UInt8])
    }

    let kid: String?
    /// The `alg` the key is pinned to, if the set says.
    let alg: String?
    let material: Material

    /// The JWS algorithms this key can verify.
    func verifies(_ alg: String) -> Bool {
        if let pinned = self.alg, pinned != alg { return false }
        switch material {
        case .rsa: return alg == "RS256" || alg == "PS256"
        case .p256: return alg == "ES256"
        }
    }

    /// The signing keys of a JWKS document; nil when it is not one (no `keys` array).
    static func set(from bytes: [UInt8]) -> [JWK]? {
        guard let doc = (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any],
            let keys = doc["keys"] as? [Any]
        else { return nil }
        return keys.compactMap { ($0 as? [String: Any]).flatMap(JWK.init(json:)) }
    }

    init(kid: String?, alg: String?, material: Material) {
        self.kid = kid
        self.alg = alg
        self.material = material
    }

    init?(json k: [String: Any]) {
        if let use = k["use"] as? String, use != "sig" { return nil }
        kid = k["kid"] as? String
        alg = k["alg"] as? String
        switch k["kty"] as? String {
        case "RSA":
            guard let n = (k["n"] as? String).flatMap(Base64URL.decode),
                let e = (k["e"] as? String).flatMap(Base64URL.decode),
                n.count >= 256, !e.isEmpty, e.count <= 8
            else { return nil }  // under 2048 bits: not trusted
            material = .rsa(n: n, e: e)
        case "EC":
            guard k["crv"] as? String == "P-256", let x = (k["x"] as? String).flatMap(Base64URL.decode),
                let y = (k["y"] as? String).flatMap(Base64URL.decode), x.count == 32, y.count == 32
            else { return nil }
            material = .p256(x: x, y: y)
        default:
            return nil
        }
    }

    /// The keys of `set` that may have signed a token with header `alg` and `kid`: the one with that `kid`, or
    /// without a `kid` in the token every key that fits the algorithm (issuers with one key often omit it).
    static func candidates(in set: [JWK], alg: String, kid: String?) -> [JWK] {
        set.filter { k in
            guard k.verifies(alg) else { return false }
            if let kid { return k.kid == kid }
            return true
        }
    }
}
