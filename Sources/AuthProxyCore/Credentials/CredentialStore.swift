/// The configured credentials and the matching rule: for a request URL, the credential with the longest
/// matching prefix wins; ties go to the one written first in the file.
public struct CredentialStore: Sendable {
    public let credentials: [Credential]
    /// Indices into `credentials` by role, so that each lookup only visits candidates (and a proxy without
    /// network credentials does no network matching at all per request).
    private let tokenIndices: [Int]
    /// Network credentials by slot (``NetworkSlot``): within a slot the longest match wins; the slots combine.
    private let networkIndices: [(slot: NetworkSlot, indices: [Int])]
    /// `layer = "gateway"` credentials: they apply together with the service credential, not instead of it.
    private let gatewayIndices: [Int]

    public init(_ credentials: [Credential]) {
        self.credentials = credentials
        var token: [Int] = [], gateway: [Int] = []
        var network: [NetworkSlot: [Int]] = [:]
        for (i, c) in credentials.enumerated() {
            if c.layer == .gateway {
                gateway.append(i)
                continue
            }
            switch c.kind.role {
            case .token: token.append(i)
            case .network(let slot): network[slot, default: []].append(i)
            }
        }
        tokenIndices = token
        gatewayIndices = gateway
        networkIndices = NetworkSlot.allCases.compactMap { slot in network[slot].map { (slot, $0) } }
    }

    /// The gateway-layer credential for `target` (the most specific), if any.
    public func gatewayCredential(for target: URLTarget) -> Credential? {
        gatewayIndices.isEmpty ? nil : best(among: gatewayIndices, for: target).map { credentials[$0] }
    }

    public var isEmpty: Bool { credentials.isEmpty }

    /// The token-type credential for `target`, if any.
    public func tokenCredential(for target: URLTarget) -> Credential? {
        best(among: tokenIndices, for: target).map { credentials[$0] }
    }

    /// The network-type credentials for `target`: within each slot the longest match wins, and the slots
    /// combine (a host can take a server-trust, a certificate and a password credential at once).
    public func network(for target: URLTarget) -> NetworkAuth {
        var n = NetworkAuth()
        for (_, indices) in networkIndices {
            if let i = best(among: indices, for: target), let k = credentials[i].kind as? any NetworkKind {
                k.contribute(to: &n, credential: credentials[i].name)
            }
        }
        return n
    }

    private func networkCredentials(for target: URLTarget) -> [Credential?] {
        networkIndices.map { best(among: $0.indices, for: target).map { credentials[$0] } }
    }

    /// Every credential that applies to a request for `target`: the gateway one, the token-type one and each
    /// network slot's.
    public func applicable(for target: URLTarget) -> [Credential] {
        ([gatewayCredential(for: target), tokenCredential(for: target)] + networkCredentials(for: target)).compactMap {
            $0
        }
    }

    /// Whether some credential's prefix is on `target`'s scheme, host and port (whatever its path).
    public func matchesOrigin(_ target: URLTarget) -> Bool {
        credentials.contains { c in
            c.match.contains { p in
                var hostOnly = p
                hostOnly.path = ""
                return hostOnly.matches(target)
            }
        }
    }

    /// The server-trust credential for `target`, if any.
    public func trust(for target: URLTarget) -> ServerTrustSettings? {
        guard let trust = networkIndices.first(where: { $0.slot == .trust }) else { return nil }
        var n = NetworkAuth()
        if let i = best(among: trust.indices, for: target), let k = credentials[i].kind as? any NetworkKind {
            k.contribute(to: &n, credential: credentials[i].name)
        }
        return n.trust
    }

    /// Whether a credential that matches `target` asks for `http://` to go upstream over https.
    public func upgradesToHTTPS(_ target: URLTarget) -> Bool {
        credentials.contains { c in c.upgradeToHTTPS && c.match.contains { $0.matches(target) } }
    }

    /// The index of the candidate with the most specific matching prefix; the first written wins a tie.
    private func best(among indices: [Int], for target: URLTarget) -> Int? {
        var best: (index: Int, score: Int)? = nil
        for i in indices {
            for p in credentials[i].match where p.matches(target) {
                let score = p.specificity
                if best == nil || score > best!.score { best = (i, score) }
            }
        }
        return best?.index
    }

    /// Whether any credential (of any type) matches `target`.
    public func matchesAny(_ target: URLTarget) -> Bool {
        credentials.contains { c in c.match.contains { $0.matches(target) } }
    }

    /// Whether any credential's prefix covers `host:port`, over https or http (for CONNECT: browsers, .NET and
    /// Python `websockets` tunnel even plain `ws://` through CONNECT, which then carries http inside).
    public func matchesHost(_ host: String, port: Int) -> Bool {
        matchesOrigin(URLTarget(scheme: "https", host: host, port: port, pathAndQuery: "/"))
            || matchesOrigin(URLTarget(scheme: "http", host: host, port: port, pathAndQuery: "/"))
    }

    /// Whether a credential with `intercept = false` covers `host:port` (as ``matchesHost(_:port:)`` does): a CONNECT
    /// there stays a blind tunnel, whatever other credentials match it.
    public func declinesInterception(_ host: String, port: Int) -> Bool {
        let https = URLTarget(scheme: "https", host: host, port: port, pathAndQuery: "/")
        let http = URLTarget(scheme: "http", host: host, port: port, pathAndQuery: "/")
        return credentials.contains { c in
            !c.intercept
                && c.match.contains { p in
                    var hostOnly = p
                    hostOnly.path = ""
                    return hostOnly.matches(https) || hostOnly.matches(http)
                }
        }
    }

    public func credential(named name: String) -> Credential? {
        credentials.first { $0.name == name }
    }
}

/// The network authentication that applies to one request.
public struct NetworkAuth: Sendable, Equatable {
    public var password: PasswordSettings? = nil
    public var passwordName: String? = nil
    public var kerberos: KerberosSettings? = nil
    public var certificate: ClientCertificateSettings? = nil
    public var certificateName: String? = nil
    public var trust: ServerTrustSettings? = nil

    /// Keeps only what `other` has too: for a path whose raw and normalised forms differ, a network
    /// credential applies only when both forms select it.
    func keepingShared(with other: NetworkAuth) -> NetworkAuth {
        var n = NetworkAuth()
        if password == other.password && passwordName == other.passwordName {
            n.password = password; n.passwordName = passwordName
        }
        if kerberos == other.kerberos { n.kerberos = kerberos }
        if certificate == other.certificate && certificateName == other.certificateName {
            n.certificate = certificate
            n.certificateName = certificateName
        }
        if trust == other.trust { n.trust = trust }
        return n
    }

    /// Takes each type `other` has and this one lacks.
    mutating func fill(from other: NetworkAuth) {
        if password == nil { password = other.password; passwordName = other.passwordName }
        if kerberos == nil { kerberos = other.kerberos }
        if certificate == nil { certificate = other.certificate; certificateName = other.certificateName }
        if trust == nil { trust = other.trust }
    }

    /// Whether an upstream 401 may be answered by libcurl (so intermediate 401s are not the final answer).
    public var answersChallenges: Bool { password != nil || kerberos != nil }
}
