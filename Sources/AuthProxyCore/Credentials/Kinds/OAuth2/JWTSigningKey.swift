import CAuthProxyShims
import COpenSSL

/// A private key that signs `private_key_jwt` client assertions and jwt-bearer grants with OpenSSL (`EVP_DigestSign`): RS256 (RSA
/// PKCS#1 v1.5, SHA-256), PS256 (RSA-PSS, SHA-256, 32-byte salt) or ES256 (ECDSA P-256, its DER signature turned
/// into JWS's raw `r||s`).
///
/// The key file is read again for each assertion (one per token request, minutes apart), so a rotated key is
/// used without a reload. Owns its `EVP_PKEY`; used on one thread at a time (the token service's queue).
final class JWTSigningKey {
    let algorithm: OAuth2Settings.KeyAlgorithm
    private let key: OpaquePointer

    init(pem: [UInt8], algorithm: OAuth2Settings.KeyAlgorithm, source: String) throws(OAuth2Problem) {
        guard let bio = pem.withUnsafeBytes({ BIO_new_mem_buf($0.baseAddress, Int32($0.count)) }) else {
            throw OAuth2Problem("cannot read \(source): out of memory")
        }
        defer { BIO_free(bio) }
        guard let key = ap_pem_read_private_key(bio, nil) else {
            ERR_clear_error()
            throw OAuth2Problem("\(source) holds no unencrypted PEM private key")
        }
        let kind = ap_pkey_jws_kind(key)
        let fits = algorithm == .es256 ? kind == 2 : kind == 1
        guard fits else {
            EVP_PKEY_free(key)
            throw OAuth2Problem(
                algorithm == .es256
                    ? "\(source) is not an EC P-256 key, which ES256 needs"
                    : "\(source) is not an RSA key of at least 2048 bits, which \(algorithm.rawValue) needs")
        }
        self.key = key
        self.algorithm = algorithm
    }

    /// Reads the PEM key at `path`.
    convenience init(path: String, algorithm: OAuth2Settings.KeyAlgorithm) throws(OAuth2Problem) {
        guard let text = readTextFile(path) else {
            throw OAuth2Problem("cannot read the private key '\(path)': \(lastErrorString())")
        }
        try self.init(pem: Array(text.utf8), algorithm: algorithm, source: "'\(path)'")
    }

    /// Takes over a key (tests).
    init(owning key: OpaquePointer, algorithm: OAuth2Settings.KeyAlgorithm) {
        self.key = key
        self.algorithm = algorithm
    }

    deinit { EVP_PKEY_free(key) }

    /// The JWS signature of `input` (the `header.claims` signing input); nil when OpenSSL fails.
    func sign(_ input: [UInt8]) -> [UInt8]? {
        var out = [UInt8](repeating: 0, count: Int(ap_pkey_size(key)))
        var len = out.count
        let ok = input.withUnsafeBufferPointer { i in
            ap_sign_sha256(key, algorithm == .ps256 ? 1 : 0, i.baseAddress, i.count, &out, &len)
        }
        guard ok == 1 else {
            ERR_clear_error()
            return nil
        }
        let signature = Array(out[0..<len])
        return algorithm == .es256 ? ClientAssertionJWT.rawECDSASignature(der: signature) : signature
    }

    /// A whole signed assertion for `clientID` to send to `audience` (the token endpoint) at `now` (seconds).
    func assertion(clientID: String, audience: String, kid: String?, x5tS256: String?, now: Int64) -> String? {
        let header = ClientAssertionJWT.header(alg: algorithm, kid: kid, x5tS256: x5tS256)
        let claims = ClientAssertionJWT.claims(
            clientID: clientID, audience: audience, jti: Base64URL.encode(Crypto.random(18)), issuedAt: now)
        return signed(header: header, claims: claims)
    }

    /// The compact JWS of `header` and `claims` (JSON texts); nil when OpenSSL fails.
    func signed(header: String, claims: String) -> String? {
        let input = ClientAssertionJWT.signingInput(header: header, claims: claims)
        guard let signature = sign(Array(input.utf8)) else { return nil }
        return input + "." + Base64URL.encode(signature)
    }

    /// The `x5t#S256` of the PEM certificate at `path`: the base64url SHA-256 of its DER encoding.
    static func thumbprint(certificatePath path: String) throws(OAuth2Problem) -> String {
        guard let text = readTextFile(path) else {
            throw OAuth2Problem("cannot read the certificate '\(path)': \(lastErrorString())")
        }
        return try thumbprint(pem: Array(text.utf8), source: "'\(path)'")
    }

    static func thumbprint(pem: [UInt8], source: String) throws(OAuth2Problem) -> String {
        guard let bio = pem.withUnsafeBytes({ BIO_new_mem_buf($0.baseAddress, Int32($0.count)) }) else {
            throw OAuth2Problem("cannot read \(source): out of memory")
        }
        defer { BIO_free(bio) }
        guard let cert = PEM_read_bio_X509(bio, nil, nil, nil) else {
            ERR_clear_error()
            throw OAuth2Problem("\(source) holds no PEM certificate")
        }
        defer { X509_free(cert) }
        var der: UnsafeMutablePointer<UInt8>? = nil
        let n = ap_x509_der(cert, &der)
        guard n > 0, let der else { throw OAuth2Problem("cannot encode the certificate \(source)") }
        defer { ap_openssl_free(der) }
        return Base64URL.encode(Crypto.sha256(Array(UnsafeBufferPointer(start: der, count: Int(n)))))
    }
}
