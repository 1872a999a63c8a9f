/// `GET /readyz`: ready when every listener is open, the proxy is not shutting down, every token credential
/// with `prefetch = true` holds a valid token for each of its server roots, and, with `upstream_pac`, a PAC file
/// is in force and routing is not stuck in it. A pure decision over those facts.
public struct Readiness: Sendable, Equatable {
    public var ready: Bool
    /// Why not, one reason per problem (empty when ready).
    public var reasons: [String]

    static func evaluate(
        listeners: [StatusReport.Listener], shuttingDown: Bool,
        prefetch: [(credential: String, key: String)], pac: PacResolver.Status? = nil, cluster: ClusterStatus? = nil,
        status: (String) -> TokenStatus?
    ) -> Readiness {
        var reasons: [String] = []
        if shuttingDown { reasons.append("shutting down") }
        // `[cluster] required = true`: a replica that cannot share its tokens is taken out of rotation. Without it,
        // a replica on its own still serves (from its memory and state file), so it stays ready.
        if let cluster, cluster.required, !cluster.connected {
            reasons.append(
                "Redis (\(cluster.redis), [cluster] required) cannot be used: \(cluster.problem ?? "not connected")")
        }
        // Without a PAC file in force every request that needs a route is refused (`upstream_pac`).
        if let pac, !pac.loaded {
            var r = "no PAC file loaded from \(pac.source ?? "upstream_pac")"
            if let e = pac.lastError { r += ": \(e)" }
            reasons.append(r)
        }
        // An evaluation looping or the PAC worker restarting: requests for destinations not evaluated lately
        // wait (up to upstream_pac_timeout_seconds, then a 502).
        if let pac, let stall = pac.stall { reasons.append(stall) }
        for l in listeners where !l.open { reasons.append("listener \(l.address) is not open") }
        for p in prefetch {
            let root = p.key.firstIndex(of: "|").map { String(p.key[p.key.index(after: $0)...]) } ?? p.key
            guard let s = status(p.key) else {
                reasons.append("credential '\(p.credential)' has no token for \(root) yet")
                continue
            }
            if !s.hasValidToken {
                var r = "credential '\(p.credential)' has no valid token for \(root) (\(s.state.rawValue))"
                if let e = s.lastError { r += ": \(e)" }
                reasons.append(r)
            }
        }
        return Readiness(ready: reasons.isEmpty, reasons: reasons)
    }

    /// The JSON body of `/readyz`.
    var json: String {
        let list = reasons.map { "\"\(jsonEscaped($0))\"" }.joined(separator: ",")
        return ready ? "{\"ready\":true}\n" : "{\"ready\":false,\"reasons\":[\(list)]}\n"
    }
}
