import Foundation

/// A compact JWS (`header.claims.signature`) as a bearer token carries it, decoded but not yet trusted: the
/// signature is checked by ``JWSVerifier``, the claims by ``JWTClaimCheck``.
struct JWT {
    /// The signed part, `base64url(header).base64url(claims)`, as bytes.
    let signingInput: [UInt8]
    let signature: [UInt8]
    let alg: String
    let kid: String?
    let claims: [String: Any]

    /// Tokens longer than this are refused unread (an ID token is a few KiB; the request head is bounded anyway).
    static let maxLength = 16 * 1024

    /// Why a token could not be read, in words safe for a client and a log (never the token).
    struct Malformed: Error, Equatable {
        let reason: String
    }

    static func parse(_ token: some StringProtocol) throws(Malformed) -> JWT {
        guard token.utf8.count <= maxLength else { throw Malformed(reason: "the token is longer than 16 KiB") }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else {
            throw Malformed(
                reason: parts.count == 5
                    ? "the token is encrypted (JWE): send the ID token or a signed access token"
                    : "the token is not a JWT (expected header.claims.signature)")
        }
        guard let headerBytes = Base64URL.decode(parts[0]), let claimBytes = Base64URL.decode(parts[1]),
            let signature = Base64URL.decode(parts[2])
        else { throw Malformed(reason: "the token is not base64url") }
        guard let header = object(headerBytes) else { throw Malformed(reason: "the token's header is not JSON") }
        guard let claims = object(claimBytes) else { throw Malformed(reason: "the token's claims are not JSON") }
        guard let alg = header["alg"] as? String else { throw Malformed(reason: "the token's header has no alg") }
        if header["crit"] != nil {
            // RFC 7515 §4.1.11: extensions the verifier does not understand must fail it.
            throw Malformed(reason: "the token's header has critical extensions (crit)")
        }
        return JWT(
            signingInput: Array("\(parts[0]).\(parts[1])".utf8), signature: signature, alg: alg,
            kid: header["kid"] as? String, claims: claims)
    }

    private static func object(_ bytes: [UInt8]) -> [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any]
    }
}
