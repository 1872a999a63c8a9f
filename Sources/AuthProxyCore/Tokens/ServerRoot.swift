import Foundation

/// ArcGIS roots of a URL: a server root is the URL up to `/rest/` (`https://host/arcgis`), a portal root the
/// URL up to `/sharing/` (`https://host/portal`).
enum ServerRoot {
    /// The path segments that mark an ArcGIS API taking tokens, and whether the root before them is a portal:
    /// the REST API of a server (`/rest/`) and of a portal (`/sharing/`), their token services (`/tokens/`),
    /// their administrator APIs (`/admin/`, `/portaladmin/`) and a server's OGC/SOAP endpoints
    /// (`/services/…/WMSServer`).
    static let apiSegments: [(segment: String, isPortal: Bool)] = [
        ("sharing", true), ("portaladmin", true), ("rest", false), ("tokens", false), ("admin", false),
        ("services", false),
    ]

    /// An API root, comparable (tests).
    struct API: Equatable, Sendable {
        var root: String
        var isPortal: Bool
    }

    /// The root of `target` and whether it is a portal, when the URL is in an ArcGIS API that takes tokens
    /// (the earliest segment of ``apiSegments`` decides); nil for anything else — a portal's home and app pages,
    /// a web adaptor's static files — which needs no token.
    static func api(_ target: URLTarget) -> (root: String, isPortal: Bool)? {
        // A byte scan of whole segments, the first listed one wins (this runs for every request under a
        // refreshable credential: no Foundation searches).
        var path = target.path
        let found: (at: Int, isPortal: Bool)? = path.withUTF8 { u in
            var i = 0
            while i < u.count {
                guard u[i] == UInt8(ascii: "/") else {
                    i += 1
                    continue
                }
                var j = i + 1
                while j < u.count, u[j] != UInt8(ascii: "/") { j += 1 }
                if let isPortal = apiSegment(UnsafeBufferPointer(rebasing: u[(i + 1)..<j])) { return (i, isPortal) }
                i = j
            }
            return nil
        }
        guard let found else { return nil }
        return (origin(target) + String(decoding: Array(path.utf8.prefix(found.at)), as: UTF8.self), found.isPortal)
    }

    /// Whether `segment` is one of ``apiSegments`` (ASCII case ignored), and if so whether it marks a portal.
    private static func apiSegment(_ segment: UnsafeBufferPointer<UInt8>) -> Bool? {
        for (name, isPortal) in apiSegmentBytes where name.count == segment.count {
            var same = true
            for k in 0..<name.count where segment[k] | 0x20 != name[k] {
                same = false
                break
            }
            if same { return isPortal }
        }
        return nil
    }

    private static let apiSegmentBytes: [(name: [UInt8], isPortal: Bool)] = apiSegments.map {
        (Array($0.segment.utf8), $0.isPortal)
    }

    /// The root of `target`, and whether it is a portal: ``api(_:)``, else the first path segment (`/arcgis`)
    /// or the bare origin (what `authproxy doctor` probes).
    static func of(_ target: URLTarget) -> (root: String, isPortal: Bool) {
        if let a = api(target) { return a }
        let segments = String(target.path).split(separator: "/", maxSplits: 1, omittingEmptySubsequences: true)
        return (segments.first.map { origin(target) + "/" + $0 } ?? origin(target), false)
    }

    private static func origin(_ target: URLTarget) -> String {
        target.isDefaultPort
            ? "\(target.scheme)://\(target.urlHost)" : "\(target.scheme)://\(target.urlHost):\(target.port)"
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
