/// How an `oauth2` access token goes into a request (RFC 6750): `Authorization: Bearer`, the `access_token`
/// query parameter, or `Proxy-Authorization: Bearer` for an identity-aware proxy that reads it there (Google IAP).
/// Pure functions; a request never carries two access tokens in one place.
///
/// The client's own credential: a request that already has an `Authorization` header (any scheme: a client that
/// signs in itself) or a non-empty `access_token` parameter is left alone unless the credential sets
/// `override_client_token = true` — as an `api-key` credential treats a client's own token. With the override, the
/// client's `Authorization` and `access_token` go and the proxy's token takes their place. In `Proxy-Authorization`
/// the token takes nothing of the client's: its `Authorization` and `access_token` are for the service behind the
/// gateway, and its `Proxy-Authorization` was for authproxy (never forwarded).
enum OAuth2Injection {
    private static let accessTokenName = Array("access_token".utf8)

    /// Whether the client brings its own authorization (see the type's comment).
    static func clientHasToken(
        pathAndQuery: String, headers: HTTPHeaders, placement: OAuth2Settings.Placement = .header
    ) -> Bool {
        if placement == .proxyAuthorization { return false }
        if headers.values("authorization").contains(where: {
            TokenInjection.headerCredential($0) == .bearerToken || TokenInjection.headerCredential($0) == .other
        }) {
            return true
        }
        return queryHasAccessToken(pathAndQuery, nonEmpty: true)
    }

    /// The request with `token` at `placement`; for `header` and `query` the client's `Authorization` and
    /// `access_token` are removed first.
    /// `keepingAuthorization`: a gateway's token in the query leaves `Authorization` to the service behind it.
    static func apply(
        token: String, placement: OAuth2Settings.Placement, pathAndQuery: String, headers: HTTPHeaders,
        keepingAuthorization: Bool = false
    ) -> (pathAndQuery: String, headers: HTTPHeaders) {
        var h = headers
        if placement == .proxyAuthorization {
            h.setInjectedProxyAuthorization("Bearer \(token)")
            return (pathAndQuery, h)
        }
        var path = removingAccessToken(pathAndQuery)
        switch placement {
        case .header:
            h.setInjected(name: "Authorization", value: "Bearer \(token)")
        case .query:
            if !keepingAuthorization { h.remove(name: "authorization") }
            path +=
                path.utf8.contains(UInt8(ascii: "?")) ? (path.hasSuffix("?") || path.hasSuffix("&") ? "" : "&") : "?"
            path += "access_token=" + TokenInjection.percentEncoded(token)
        case .proxyAuthorization:
            break  // applied above
        }
        return (path, h)
    }

    static func queryHasAccessToken(_ pathAndQuery: String, nonEmpty: Bool = false) -> Bool {
        var s = pathAndQuery
        return s.withUTF8 { u in
            guard let q = u.firstIndex(of: UInt8(ascii: "?")) else { return false }
            return TokenInjection.hasField(
                UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: u[(q + 1)...])),
                accessTokenName, nonEmpty: nonEmpty)
        }
    }

    /// `pathAndQuery` without its `access_token` fields (as the server decodes names: `%61ccess_token` too).
    static func removingAccessToken(_ pathAndQuery: String) -> String {
        guard queryHasAccessToken(pathAndQuery), let q = pathAndQuery.utf8.firstIndex(of: UInt8(ascii: "?")) else {
            return pathAndQuery
        }
        var kept: [UInt8] = []
        let query = Array(pathAndQuery[pathAndQuery.index(after: q)...].utf8)
        for field in query.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let isToken = field.withUnsafeBytes { TokenInjection.fieldNameIs($0, accessTokenName) }
            if isToken { continue }
            if !kept.isEmpty { kept.append(UInt8(ascii: "&")) }
            kept.append(contentsOf: field)
        }
        let path = String(pathAndQuery[..<q])
        return kept.isEmpty ? path : path + "?" + String(decoding: kept, as: UTF8.self)
    }
}
