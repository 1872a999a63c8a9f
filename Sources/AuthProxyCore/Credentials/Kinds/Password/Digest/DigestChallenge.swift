/// A `WWW-Authenticate: Digest …` challenge (RFC 7616 §3.3), read from the challenges ``AuthChallenge`` parsed.
struct DigestChallenge: Sendable, Equatable {
    var realm: String
    var nonce: String
    var opaque: String?
    var algorithm: DigestAlgorithm
    /// The `qop` options offered, lower case; empty for an RFC 2069 server that offers none.
    var qop: [String]
    /// The nonce was stale, not the login: the same credentials answer the new nonce (§3.3).
    var stale: Bool
    /// `charset=UTF-8`: the user name may be sent as `username*` (§3.4.4).
    var utf8: Bool

    /// Why a challenge cannot be answered, for the log.
    enum Refusal: Error, Equatable, CustomStringConvertible {
        case missing(String)
        case unsupportedAlgorithm(String)
        case userhash
        case authIntWithBody
        case unsupportedQop(String)

        var description: String {
            switch self {
            case .missing(let p): return "the server's Digest challenge has no \(p)"
            case .unsupportedAlgorithm(let a):
                return
                    "the server's Digest challenge asks for algorithm \(a); MD5, MD5-sess, SHA-256 and SHA-256-sess are supported"
            case .userhash: return "the server's Digest challenge asks for userhash=true, which is not supported"
            case .authIntWithBody:
                return "the server's Digest challenge offers only qop=auth-int (a digest of the request body), "
                    + "which is not supported for a request with a body"
            case .unsupportedQop(let q): return "the server's Digest challenge offers qop=\(q); auth is supported"
            }
        }
    }

    init(_ c: AuthChallenge) throws(Refusal) {
        guard let realm = c.parameter("realm") else { throw .missing("realm") }
        guard let nonce = c.parameter("nonce") else { throw .missing("nonce") }
        let name = c.parameter("algorithm") ?? "MD5"
        guard let algorithm = DigestAlgorithm(token: name) else { throw .unsupportedAlgorithm(name) }
        if c.parameter("userhash")?.lowercased() == "true" { throw .userhash }
        self.realm = realm
        self.nonce = nonce
        self.opaque = c.parameter("opaque")
        self.algorithm = algorithm
        self.qop =
            c.parameter("qop").map {
                $0.split(separator: ",").map { String($0.filter { $0 != " " && $0 != "\t" }).lowercased() }
                    .filter { !$0.isEmpty }
            } ?? []
        self.stale = c.parameter("stale")?.lowercased() == "true"
        self.utf8 = c.parameter("charset")?.lowercased() == "utf-8"
    }

    /// What the challenges of one 401 offer the proxy's Digest login.
    enum Pick: Equatable {
        /// No Digest challenge.
        case none
        /// The Digest challenge to answer: the strongest algorithm among those offered that can be answered.
        case usable(DigestChallenge)
        /// Digest was offered, and no challenge of it can be answered: why (the first challenge's reason).
        case unusable(Refusal)
    }

    static func pick(_ challenges: [AuthChallenge]) -> Pick {
        var best: DigestChallenge? = nil
        var firstRefusal: Refusal? = nil
        for c in challenges where c.is("digest") {
            do throws(Refusal) {
                let d = try DigestChallenge(c)
                if best == nil || d.algorithm.strength > best!.algorithm.strength { best = d }
            } catch {
                if firstRefusal == nil { firstRefusal = error }
            }
        }
        if let best { return .usable(best) }
        return firstRefusal.map { .unusable($0) } ?? .none
    }

    /// The `qop` to answer with: `auth` when offered; `auth-int` only for a request without a body (its hash is
    /// the empty body's: the proxy does not hash bodies it streams); none for an RFC 2069 server.
    func chooseQop(hasBody: Bool) throws(Refusal) -> DigestQop {
        if qop.isEmpty { return .none }
        if qop.contains("auth") { return .auth }
        if qop.contains("auth-int") {
            if hasBody { throw .authIntWithBody }
            return .authIntEmptyBody
        }
        throw .unsupportedQop(qop.joined(separator: ","))
    }
}

/// The quality of protection an `Authorization: Digest` is computed with.
enum DigestQop: Equatable, Sendable {
    /// RFC 2069: no qop, nc or cnonce.
    case none
    case auth
    /// `auth-int` over an empty body.
    case authIntEmptyBody
}
