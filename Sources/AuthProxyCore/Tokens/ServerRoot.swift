/// ArcGIS roots of a URL: a server root is the URL up to `/rest/` (`https://host/arcgis`), a portal root the
/// URL up to `/sharing/` (`https://host/portal`).
enum ServerRoot {
    /// The root of `target`, and whether it is a portal.
    static func of(_ target: URLTarget) -> (root: String, isPortal: Bool) {
        let origin = target.isDefaultPort ? "\(target.scheme)://\(target.urlHost)" : "\(target.scheme)://\(target.urlHost):\(target.port)"
        let path = String(target.path)
        let lower = path.lowercased()
        if let r = lower.firstRange(of: "/sharing/") ?? (lower.hasSuffix("/sharing") ? lower.firstRange(of: "/sharing") : nil) {
            return (origin + path[..<r.lowerBound], true)
        }
        if let r = lower.firstRange(of: "/rest/") ?? (lower.hasSuffix("/rest") ? lower.firstRange(of: "/rest") : nil) {
            return (origin + path[..<r.lowerBound], false)
        }
        if let r = lower.firstRange(of: "/tokens/") {
            return (origin + path[..<r.lowerBound], false)
        }
        // Otherwise the first path segment (`/arcgis`), or the bare origin.
        let segments = path.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: true)
        return (segments.first.map { origin + "/" + $0 } ?? origin, false)
    }

    /// `https://host/portal` → `https://host/portal/sharing/rest`.
    static func sharingRest(_ portal: String) -> String {
        var p = portal
        while p.hasSuffix("/") { p.removeLast() }
        if p.lowercased().hasSuffix("/sharing/rest") { return p }
        if p.lowercased().hasSuffix("/sharing") { return p + "/rest" }
        return p + "/sharing/rest"
    }

    /// Compares two roots ignoring case, default ports and trailing slashes.
    static func same(_ a: String, _ b: String) -> Bool {
        normalized(a) == normalized(b)
    }

    static func normalized(_ s: String) -> String {
        guard let u = HTTPURL.parse(s) else { return s.lowercased() }
        var r = u.withoutTrailingSlash.lowercased()
        if r.lowercased().hasSuffix("/sharing/rest") { r.removeLast("/sharing/rest".count) }
        return r
    }
}
