/// The configured credentials and the matching rule: for a request URL, the credential with the longest
/// matching prefix wins; ties go to the one written first in the file.
public struct CredentialStore: Sendable {
    public let credentials: [Credential]

    public init(_ credentials: [Credential]) {
        self.credentials = credentials
    }

    public var isEmpty: Bool { credentials.isEmpty }

    /// The token-type credential for `target`, if any.
    public func tokenCredential(for target: URLTarget) -> Credential? {
        best(for: target) { $0.kind.isToken }
    }

    /// The server-trust credential for `target`, if any.
    public func trust(for target: URLTarget) -> ServerTrustSettings? {
        guard case .serverTrust(let t)? = best(for: target, where: { !$0.kind.isToken })?.kind else { return nil }
        return t
    }

    /// Whether a credential that matches `target` asks for `http://` to go upstream over https.
    public func upgradesToHTTPS(_ target: URLTarget) -> Bool {
        credentials.contains { c in c.upgradeToHTTPS && c.match.contains { $0.matches(target) } }
    }

    private func best(for target: URLTarget, where include: (Credential) -> Bool) -> Credential? {
        var best: (credential: Credential, score: Int)? = nil
        for c in credentials where include(c) {
            for p in c.match where p.matches(target) {
                let score = p.specificity
                if best == nil || score > best!.score { best = (c, score) }
            }
        }
        return best?.credential
    }

    /// Whether any credential (of any type) matches `target`.
    public func matchesAny(_ target: URLTarget) -> Bool {
        credentials.contains { c in c.match.contains { $0.matches(target) } }
    }

    /// Whether any credential's prefix covers `host:port` over https (for CONNECT).
    public func matchesHost(_ host: String, port: Int) -> Bool {
        let target = URLTarget(scheme: "https", host: host, port: port, pathAndQuery: "/")
        return credentials.contains { c in
            c.match.contains { p in
                var hostOnly = p
                hostOnly.path = ""
                return hostOnly.matches(target)
            }
        }
    }

    public func credential(named name: String) -> Credential? {
        credentials.first { $0.name == name }
    }
}
