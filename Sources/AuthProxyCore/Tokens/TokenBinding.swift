/// What an ArcGIS token is bound to, as `generateToken`'s `client` field asks: a `Referer` every request carrying
/// the token must send (`client=referer`), or the address the token was requested from (`client=requestip`).
///
/// A `requestip` token works only from one egress address: a token shared through `[cluster]` by replicas behind
/// other addresses, a parent-proxy failover or dual-stack egress meet a 498 for a token that is valid. So, as
/// Esri's SDKs do, credentials without a configured `referer` bind their tokens to a synthetic referer: stable per
/// credential (the same on every replica and after a restart), derived from its name and nothing secret.
public enum TokenBinding: Equatable, Sendable {
    /// `client=referer`: the token goes with this `Referer`, replacing the client's.
    case referer(String)
    /// `client=requestip` (or `ip`): the token works from the address that asked for it.
    case address(client: String)

    /// The `referer` an `arcgis-token` credential named `credential` binds its tokens to when none is configured,
    /// and the one federated server tokens of `oauth-app` and `oauth-user` credentials are bound to.
    public static func syntheticReferer(credential: String) -> String {
        let hex = Array("0123456789ABCDEF".utf8)
        var out = Array("app://authproxy/".utf8)
        for b in credential.utf8 {
            if isUnreserved(b) {
                out.append(b)
            } else {
                out += [UInt8(ascii: "%"), hex[Int(b >> 4)], hex[Int(b & 15)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The binding of `c`'s tokens: an `arcgis-token`'s as configured (its `referer` is the synthetic one unless
    /// one is set), the synthetic referer for the server tokens an OAuth credential's portal token is exchanged for;
    /// nil for kinds whose tokens the proxy does not bind (`token` sends the referer it was generated for).
    public static func of(_ c: Credential) -> TokenBinding? {
        (c.kind as? any FetchedTokenKind)?.binding(credential: c.name)
    }

    /// The `Referer` requests carrying such a token send.
    public var referer: String? {
        if case .referer(let r) = self { return r }
        return nil
    }

    /// The fields a federation exchange (portal `generateToken` with `token` + `serverUrl`) adds so the server token
    /// is bound as the credential's tokens are, as arcgis-rest-js asks (`client=referer`); none for an address
    /// binding: the server token inherits the portal token's.
    public var exchangeFields: [(String, String)] {
        guard let r = referer else { return [] }
        return [("client", "referer"), ("referer", r)]
    }

    /// What `authproxy check` warns about: a credential whose tokens work from one address only, where the
    /// address can change under them (`[cluster]` shares its tokens with other replicas; several parents or a PAC
    /// file move its egress on a failover).
    public static func warnings(_ credentials: [Credential], clustered: Bool, upstream: UpstreamProxyConfig)
        -> [String]
    {
        var out: [String] = []
        for c in credentials {
            guard case .address(let client)? = of(c), client == "requestip" else { continue }
            var why: [String] = []
            if clustered { why.append("[cluster] shares its tokens with replicas behind other addresses") }
            if upstream.pac != nil {
                why.append("upstream_pac can send it through another parent")
            } else if upstream.parents.count > 1 {
                why.append("a failover to the next upstream_proxy changes that address")
            }
            guard !why.isEmpty else { continue }
            out.append(
                "credential '\(c.name)': client = \"requestip\" binds each token to the address that requested it, "
                    + "but " + why.joined(separator: "; ")
                    + ": a valid token then meets 498 (a rejection loop); leave client unset (tokens are bound to a "
                    + "stable synthetic referer) or set referer")
        }
        return out
    }

    private static func isUnreserved(_ b: UInt8) -> Bool {
        (b >= 48 && b <= 57) || (b >= 65 && b <= 90) || (b >= 97 && b <= 122) || b == 45 || b == 46 || b == 95
            || b == 126
    }
}
