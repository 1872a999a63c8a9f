/// Recognises the web tier's answer to a missing, invalid or expired token behind SAML or web-tier authentication:
/// not a 498, but a redirect to sign in — to the portal's sign-in (`…/sharing/oauth2/authorize`,
/// `…/sharing/rest/oauth2/signin`), to a SAML identity provider (`SAMLRequest=` in the `Location`), or to an
/// identity provider the credential names (`sign_in_urls`). For a request that carried a token the proxy injected,
/// such a redirect is a token rejection (refresh once, replay): relaying it would hand a GIS client a login page.
///
/// Anything else stays an ordinary redirect (`http` → `https`, a moved service), and so does a redirect answering a
/// request that is itself a sign-in going through the proxy.
public enum SignInRedirect {
    /// What the redirect leads to, for the log and the error.
    public enum Target: String, Equatable, Sendable {
        /// The portal's OAuth sign-in (any host: a federated server sends its clients to its own portal).
        case portal
        /// A SAML identity provider (an `AuthnRequest` in the `SAMLRequest` parameter).
        case saml
        /// One of the credential's `sign_in_urls`.
        case configured
    }

    /// The ends of a portal's sign-in paths (`/portal/sharing/…` on Enterprise, `/sharing/…` on ArcGIS Online).
    static let portalSignInPaths = [
        "/sharing/oauth2/authorize", "/sharing/rest/oauth2/authorize", "/sharing/oauth2/signin",
        "/sharing/rest/oauth2/signin",
    ]

    /// Whether a response of `status` with `location`, answering `request`, is a redirect to sign in, and to what.
    /// `signInURLs`: the credential's configured sign-in URLs (http(s) prefixes).
    public static func classify(status: Int, location: String?, request: URLTarget, signInURLs: [String]) -> Target? {
        guard [301, 302, 303, 307, 308].contains(status), let location, !location.isEmpty,
            !isPortalSignIn(path: request.path)
        else { return nil }
        let target = resolve(location, against: request)
        if let target, matchesConfigured(target, signInURLs) { return .configured }
        if hasSAMLRequest(location) { return .saml }
        if let target, isPortalSignIn(path: target.path) { return .portal }
        return nil
    }

    /// `location` as an absolute URL: absolute as it is, scheme-relative (`//host/…`) and path-absolute (`/…`)
    /// resolved against the request's origin; nil for anything else.
    static func resolve(_ location: String, against request: URLTarget) -> URLTarget? {
        if location.hasPrefix("//") { return HTTPURL.parse(request.scheme + ":" + location)?.target }
        if location.hasPrefix("/") {
            var t = request
            t.pathAndQuery = location
            return HTTPURL.parse(t.url)?.target
        }
        return HTTPURL.parse(location)?.target
    }

    static func isPortalSignIn(path: Substring) -> Bool {
        var p = path.lowercased()
        while p.hasSuffix("/") { p.removeLast() }
        return portalSignInPaths.contains { p.hasSuffix($0) }
    }

    /// A `SAMLRequest` query parameter (the SAML HTTP-Redirect binding), whatever the host.
    static func hasSAMLRequest(_ location: String) -> Bool {
        guard let q = location.firstIndex(of: "?") else { return false }
        let query = location[location.index(after: q)...].prefix { $0 != "#" }
        return query.split(separator: "&").contains { p in
            p.prefix { $0 != "=" }.lowercased() == "samlrequest"
        }
    }

    /// Whether `target` is under one of `prefixes` (scheme, host and port equal, the path starting with the
    /// prefix's at a segment boundary; case-insensitive, as identity providers on IIS are).
    static func matchesConfigured(_ target: URLTarget, _ prefixes: [String]) -> Bool {
        let url = target.url.lowercased()
        for p in prefixes {
            guard let prefix = HTTPURL.parse(p)?.target else { continue }
            let base = String(prefix.url.lowercased().prefix { $0 != "?" })
            guard url.hasPrefix(base) else { continue }
            if base.hasSuffix("/") { return true }
            let rest = url.dropFirst(base.count)
            if rest.isEmpty || rest.hasPrefix("/") || rest.hasPrefix("?") { return true }
        }
        return false
    }
}
