/// The configured credentials and the matching rule: for a request URL, the credential with the longest
/// matching prefix wins; ties go to the one written first in the file.
public struct CredentialStore: Sendable {
    public let credentials: [Credential]
    /// Each role's prefixes and the lookups' own, indexed (``MatchIndex``): a lookup costs the same with one
    /// credential or ten thousand. In one box: the store is copied into every request's planning.
    private let indexes: Indexes

    private final class Indexes: Sendable {
        let token: MatchIndex
        /// Network credentials by slot (``NetworkSlot``): within a slot the longest match wins; the slots combine.
        /// Empty when none is configured, so a proxy without them does no network matching per request.
        let network: [(slot: NetworkSlot, index: MatchIndex)]
        /// `layer = "gateway"` credentials: they apply together with the service credential, not instead of it.
        let gateway: MatchIndex
        /// Every credential, by full prefix and by scheme, host and port only; those with `upgrade_to_https`;
        /// those with `intercept = false` (scheme, host and port only).
        let any: MatchIndex
        let origin: MatchIndex
        let upgrade: MatchIndex
        let declines: MatchIndex
        let byName: [String: Int]
        /// Every `print_services` prefix of every credential (empty: no request is looked at as a print job).
        let printServices: [MatchPrefix]

        init(_ credentials: [Credential]) {
            var token: [(Int, [MatchPrefix])] = [], gateway: [(Int, [MatchPrefix])] = []
            var network: [NetworkSlot: [(Int, [MatchPrefix])]] = [:]
            var all: [(Int, [MatchPrefix])] = [], upgrade: [(Int, [MatchPrefix])] = []
            var declines: [(Int, [MatchPrefix])] = []
            var byName: [String: Int] = [:]
            for (i, c) in credentials.enumerated() {
                let entry = (i, c.match)
                all.append(entry)
                if c.upgradeToHTTPS { upgrade.append(entry) }
                if !c.intercept { declines.append(entry) }
                if byName[c.name] == nil { byName[c.name] = i }
                if c.layer == .gateway {
                    gateway.append(entry)
                    continue
                }
                switch c.kind.role {
                case .token: token.append(entry)
                case .network(let slot): network[slot, default: []].append(entry)
                }
            }
            self.token = MatchIndex(token)
            self.gateway = MatchIndex(gateway)
            self.network = NetworkSlot.allCases.compactMap { slot in network[slot].map { (slot, MatchIndex($0)) } }
            self.any = MatchIndex(all)
            self.origin = MatchIndex(all, pathless: true)
            self.upgrade = MatchIndex(upgrade)
            self.declines = MatchIndex(declines, pathless: true)
            self.byName = byName
            printServices = credentials.flatMap(\.printServices)
        }
    }

    public init(_ credentials: [Credential]) {
        self.credentials = credentials
        indexes = Indexes(credentials)
    }

    /// The gateway-layer credential for `target` (the most specific), if any.
    public func gatewayCredential(for target: URLTarget) -> Credential? {
        indexes.gateway.best(for: target).map { credentials[$0] }
    }

    public var isEmpty: Bool { credentials.isEmpty }

    /// Every print service prefix some credential lists (``Credential/printServices``).
    var printServices: [MatchPrefix] { indexes.printServices }

    /// The token-type credential for `target`, if any.
    public func tokenCredential(for target: URLTarget) -> Credential? {
        indexes.token.best(for: target).map { credentials[$0] }
    }

    /// The network-type credentials for `target`: within each slot the longest match wins, and the slots
    /// combine (a host can take a server-trust, a certificate and a password credential at once).
    public func network(for target: URLTarget) -> NetworkAuth {
        var n = NetworkAuth()
        for (_, index) in indexes.network {
            if let i = index.best(for: target), let k = credentials[i].kind as? any NetworkKind {
                k.contribute(to: &n, credential: credentials[i].name)
            }
        }
        return n
    }

    private func networkCredentials(for target: URLTarget) -> [Credential?] {
        indexes.network.map { $0.index.best(for: target).map { credentials[$0] } }
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
        indexes.origin.best(for: target) != nil
    }

    /// The server-trust credential for `target`, if any.
    public func trust(for target: URLTarget) -> ServerTrustSettings? {
        guard let trust = indexes.network.first(where: { $0.slot == .trust }) else { return nil }
        var n = NetworkAuth()
        if let i = trust.index.best(for: target), let k = credentials[i].kind as? any NetworkKind {
            k.contribute(to: &n, credential: credentials[i].name)
        }
        return n.trust
    }

    /// Whether a credential that matches `target` asks for `http://` to go upstream over https.
    public func upgradesToHTTPS(_ target: URLTarget) -> Bool {
        indexes.upgrade.best(for: target) != nil
    }

    /// Whether any credential (of any type) matches `target`.
    public func matchesAny(_ target: URLTarget) -> Bool {
        indexes.any.best(for: target) != nil
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
        indexes.declines.best(for: URLTarget(scheme: "https", host: host, port: port, pathAndQuery: "/")) != nil
            || indexes.declines.best(for: URLTarget(scheme: "http", host: host, port: port, pathAndQuery: "/")) != nil
    }

    public func credential(named name: String) -> Credential? {
        indexes.byName[name].map { credentials[$0] }
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

    /// Whether an upstream 401 may be answered (Digest, NTLM, Negotiate): the body is held for a second send, and
    /// with libcurl intermediate 401s are not the final answer (the own client hands on only the final one). A
    /// Basic-only password is sent before any challenge (``PasswordSettings/isBasicOnly``): its 401 is final.
    public var answersChallenges: Bool {
        // Matched, not compared with nil: `!= nil` copies each optional first (it is asked for every request).
        if case .some(let p) = password, !p.isBasicOnly { return true }
        if case .some = kerberos { return true }
        return false
    }

    /// Whether the proxy logs in upstream with a password or Kerberos identity (it then fills the request's
    /// `Authorization`, whichever client sends it).
    public var logsIn: Bool {
        if case .some = password { return true }
        if case .some = kerberos { return true }
        return false
    }
}
