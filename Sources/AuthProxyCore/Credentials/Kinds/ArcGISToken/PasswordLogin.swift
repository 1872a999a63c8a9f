import Foundation

/// How an `arcgis-token` credential (username and password) gets a token for a root: the pure decisions of
/// ``TokenFetcher``'s password login — whether the server's `rest/info` is read, which token service gets the
/// password and what lifetime is asked for, or whether the portal's token is exchanged for a federated
/// server's.
enum PasswordLogin {
    /// Whether the server's `rest/info` must be read before logging in. For a server root it always is, even
    /// when `token_url` and `expiration_minutes` are both configured: only `rest/info` says which portal the
    /// server is federated with (`owningSystemUrl`), and a portal token sent to a federated server is refused
    /// (498) until it is exchanged for a server token. A portal root has no `rest/info`.
    static func readsServerInfo(isPortal: Bool) -> Bool { !isPortal }

    /// How the token for one root is had.
    enum Plan: Equatable, Sendable {
        /// The password goes to `tokenURL` (asking for `expirationMinutes`, if any).
        case login(tokenURL: String, expirationMinutes: Int?)
        /// A server federated with `portal`: the portal's token — one password login for every server root,
        /// cached under the portal's own key — is exchanged for this server root's token.
        case exchange(portal: String)
    }

    /// The plan for `root` (a portal root when `isPortal`), given the server's `rest/info` when it could be
    /// read and the origins the credential is configured for (``TokenServiceTrust/configuredOrigins(_:)``); a
    /// failure is the message for the client's 502.
    static func plan(
        _ s: ArcGISTokenSettings, root: String, isPortal: Bool, info: ServerInfoResponse?,
        configured: Set<TokenServiceTrust.Origin> = []
    ) -> Result<Plan, PlanError> {
        let tokenURL: String
        if let u = s.tokenURL {
            tokenURL = u
        } else if isPortal {
            tokenURL = ServerRoot.sharingRest(root) + "/generateToken"
        } else if let named = namedTokenService(info) {
            // rest/info is the server's word: the password goes only to the server's own origin (or one the
            // credential is configured for) on its say-so alone.
            if case .failure(let distrust) = TokenServiceTrust.check(
                tokenService: named.url, root: root, configured: configured)
            {
                return .failure(
                    PlanError(
                        message:
                            "\(root)/rest/info names the token service \(TokenFetcher.redacted(named.url)) (\(named.field)), which \(distrust.reason): the password is not sent there; set token_url to trust it"
                    ))
            }
            tokenURL = named.url
        } else {
            return .failure(PlanError(message: "\(root)/rest/info does not name a token service; set token_url"))
        }
        // A portal token for a server federated with that portal is exchanged for a server token.
        if !isPortal, let portal = portalRoot(ofTokenService: tokenURL), let owner = info?.owningSystemURL,
            ServerRoot.same(owner, portal)
        {
            return .success(.exchange(portal: portal))
        }
        return .success(
            .login(tokenURL: tokenURL, expirationMinutes: s.expirationMinutes ?? info?.shortLivedTokenValidity))
    }

    /// The token service `rest/info` names, and which of its fields named it (for messages).
    private static func namedTokenService(_ info: ServerInfoResponse?) -> (url: String, field: String)? {
        if let u = info?.tokenServicesURL { return (u, "its authInfo.tokenServicesUrl") }
        if let o = info?.owningSystemURL {
            return (
                ServerRoot.sharingRest(o) + "/generateToken",
                "the portal of its owningSystemUrl \(TokenFetcher.redacted(o))"
            )
        }
        return nil
    }

    /// The portal root of a portal token service (`https://host/portal/sharing/rest/generateToken` →
    /// `https://host/portal`), nil for a server's own token service.
    static func portalRoot(ofTokenService url: String) -> String? {
        url.range(of: "/sharing/", options: .caseInsensitive).map { String(url[..<$0.lowerBound]) }
    }

    struct PlanError: Error, Equatable, Sendable {
        var message: String
    }
}
