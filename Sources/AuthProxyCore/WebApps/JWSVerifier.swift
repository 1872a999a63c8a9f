import CAuthProxyShims
import COpenSSL

/// A JWK made into an OpenSSL public key once (when the JWKS is read), then used to verify JWS signatures: RS256,
/// PS256 and ES256. Only these algorithms: `none` and the HMAC family (whose "key" an attacker could take from the
/// public JWKS) never verify. The key is read-only after init, and OpenSSL allows concurrent verification with one
/// `EVP_PKEY` and a context per call, so instances are shared by every event loop.
final class JWSVerifier: @unchecked Sendable {
    let jwk: JWK
    private let key: OpaquePointer

    init?(_ jwk: JWK) {
        let der = Self.subjectPublicKeyInfo(jwk.material)
        let key: OpaquePointer? = der.withUnsafeBufferPointer { b in
            var p: UnsafePointer<UInt8>? = b.baseAddress
            return d2i_PUBKEY(nil, &p, b.count)
        }
        guard let key else {
            ERR_clear_error()
            return nil
        }
        self.jwk = jwk
        self.key = key
    }

    deinit { EVP_PKEY_free(key) }

    /// Whether `signature` is this key's over `input` with `alg`.
    func verify(alg: String, input: [UInt8], signature: [UInt8]) -> Bool {
        guard jwk.verifies(alg) else { return false }
        var sig = signature
        if alg == "ES256" {
            guard signature.count == 64, let der = Self.derECDSASignature(raw: signature) else { return false }
            sig = der
        }
        let ok = input.withUnsafeBufferPointer { i in
            sig.withUnsafeBufferPointer { s in
                ap_verify_sha256(key, alg == "PS256" ? 1 : 0, i.baseAddress, i.count, s.baseAddress, s.count)
            }
        }
        if ok != 1 { ERR_clear_error() }
        return ok == 1
    }

    // MARK: DER

    /// The SubjectPublicKeyInfo of the key (what `d2i_PUBKEY` reads).
    static func subjectPublicKeyInfo(_ m: JWK.Material) -> [UInt8] {
        switch m {
        case .rsa(let n, let e):
            // rsaEncryption (1.2.840.113549.1.1.1), NULL; RSAPublicKey ::= SEQUENCE { n INTEGER, e INTEGER }
            let algorithm: [UInt8] = [
                0x30, 0x0D, 0x06, 0x09, 0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x01, 0x05, 0x00,
            ]
            let rsaKey = tlv(0x30, integer(n) + integer(e))
            return tlv(0x30, algorithm + tlv(0x03, [0] + rsaKey))
        case .p256(let x, let y):
            // id-ecPublicKey (1.2.840.10045.2.1), prime256v1 (1.2.840.10045.3.1.7); the point uncompressed
            let algorithm: [UInt8] = [
                0x30, 0x13, 0x06, 0x07, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01, 0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE,
                0x3D, 0x03, 0x01, 0x07,
            ]
            return tlv(0x30, algorithm + tlv(0x03, [0, 0x04] + x + y))
        }
    }

    /// JWS's ES256 `r || s` as the DER `ECDSA-Sig-Value` OpenSSL verifies.
    static func derECDSASignature(raw: [UInt8]) -> [UInt8]? {
        guard raw.count == 64 else { return nil }
        return tlv(0x30, integer(Array(raw[0..<32])) + integer(Array(raw[32..<64])))
    }

    /// A positive DER INTEGER of big-endian bytes: leading zeros dropped, one added when the top bit is set.
    static func integer(_ bytes: [UInt8]) -> [UInt8] {
        var v = Array(bytes.drop { $0 == 0 })
        if v.isEmpty { v = [0] }
        if v[0] & 0x80 != 0 { v.insert(0, at: 0) }
        return tlv(0x02, v)
    }

    static func tlv(_ tag: UInt8, _ content: [UInt8]) -> [UInt8] {
        let n = content.count
        let length: [UInt8]
        if n < 0x80 {
            length = [UInt8(n)]
        } else if n < 0x100 {
            length = [0x81, UInt8(n)]
        } else if n < 0x10000 {
            length = [0x82, UInt8(n >> 8), UInt8(n & 0xFF)]
        } else {
            length = [0x83, UInt8(n >> 16), UInt8((n >> 8) & 0xFF), UInt8(n & 0xFF)]
        }
        return [tag] + length + content
    }
}
