import COpenSSL

/// The hash a Digest challenge names (RFC 7616 §3.3 `algorithm`): MD5 when it names none, as RFC 2617 servers mean.
/// A `-sess` variant folds the nonce and cnonce into the first hash, once per session.
enum DigestAlgorithm: String, Sendable, Equatable, CaseIterable {
    case md5 = "MD5"
    case md5Session = "MD5-sess"
    case sha256 = "SHA-256"
    case sha256Session = "SHA-256-sess"

    /// The token as a server wrote it, any case; nil for one the proxy cannot compute (SHA-512-256, a typo).
    init?(token: String) {
        guard let a = Self.allCases.first(where: { $0.rawValue.lowercased() == token.lowercased() }) else {
            return nil
        }
        self = a
    }

    var isSession: Bool { self == .md5Session || self == .sha256Session }

    /// Preference when a server offers several (RFC 7616 §3.7: the strongest first).
    var strength: Int { self == .sha256 || self == .sha256Session ? 2 : 1 }

    /// The hash of `text` as lower-case hex, as every Digest computation writes it.
    func hash(_ text: String) -> String {
        let bytes = Array(text.utf8)
        let md = (self == .md5 || self == .md5Session) ? EVP_md5() : EVP_sha256()
        var out = [UInt8](repeating: 0, count: 32)
        var len: UInt32 = 0
        let ok = bytes.withUnsafeBytes { b in EVP_Digest(b.baseAddress, b.count, &out, &len, md, nil) }
        // A libcrypto without MD5 (a FIPS build) cannot answer: a zero digest would only be refused by the server.
        precondition(ok == 1 && len > 0, "EVP_Digest(\(rawValue)) failed")
        return Crypto.hex(Array(out.prefix(Int(len))))
    }
}
