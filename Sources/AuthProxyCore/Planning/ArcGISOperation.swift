/// What an ArcGIS REST request does, read from the last segment of its path (case ignored, as ArcGIS does). Pure.
///
/// Two decisions hang on it, both about doing something twice or differently behind the client's back:
/// - **A long `GET` goes as a `POST` form only for a read** (``GetAsPost``): a server does not treat the two alike
///   everywhere — a GET-only CSRF guard, a cache, a firewall rule — and a form that deletes is not the proxy's to
///   make. So only the operations listed in ``serviceReads`` (under `/rest/services/`) and ``portalReads`` (under
///   `/sharing/rest/`) are converted: each reads data, takes its parameters as a form as well as a query (the REST
///   API documents both), and is where long URLs occur (a `where` or `objectIds` from a selection, a geometry, a
///   `layerDefs` or `dynamicLayers` of a map export, a search query).
/// - **An edit is never sent twice** (``isEdit(path:)``): `applyEdits`, `deleteFeatures`, an item's `delete` and the
///   rest of ``edits`` change data or run a job, whatever method carries them. HTTP calls `GET` idempotent, but
///   `GET …/deleteFeatures?where=1=1` is not safe to repeat: neither an upstream retry nor a resend after a lost
///   connection repeats it once the server may have read it.
enum ArcGISOperation {
    /// Read operations of ArcGIS Server services (feature, map, image, geometry, geocode, network-free): their
    /// answers depend on their parameters alone, and they write nothing.
    static let serviceReads: Set<String> = [
        // Feature and map services, layers and tables.
        "query", "queryrelatedrecords", "querytopfeatures", "queryattachments", "querydomains", "queryanalytic",
        "querybins", "identify", "find", "generaterenderer",
        // Map and image exports: a long `layerDefs`, `dynamicLayers`, `renderingRule` or `mosaicRule`.
        "export", "exportimage",
        // Image services.
        "getsamples", "computehistograms", "computestatisticshistograms", "computepixellocation", "measure",
        // Geometry service: computations on the geometries passed in.
        "project", "buffer", "simplify", "densify", "generalize", "offset", "trimextend", "union", "intersect",
        "difference", "cut", "reshape", "autocomplete", "convexhull", "areasandlengths", "lengths", "labelpoints",
        "relation", "distance", "findtransformations", "fromgeocoordinatestring", "togeocoordinatestring",
        // Geocode services.
        "findaddresscandidates", "reversegeocode", "suggest",
    ]

    /// Read operations of the portal (`/sharing/rest/`). A portal `…/export` makes a new item, so it is not here.
    static let portalReads: Set<String> = ["search"]

    /// Operations that change data, configuration or accounts, or run a job: never sent twice, never converted.
    /// Names that begin with one of ``editVerbs`` are edits too, so an operation missing here is still caught.
    static let edits: Set<String> = [
        // Feature services and layers.
        "applyedits", "addfeatures", "updatefeatures", "deletefeatures", "calculate", "append", "truncate",
        "addattachment", "updateattachment", "deleteattachments",
        // Branch and traditional versioning, replicas.
        "reconcile", "post", "purgelock", "alter", "startediting", "stopediting", "restorerows",
        "deleteforwardedits", "create", "delete", "createreplica", "synchronizereplica", "unregisterreplica",
        // Image services.
        "add", "addrasters", "updaterasters", "deleterasters",
        // Geoprocessing: a tool may write anything; a job's cancel stops it.
        "execute", "submitjob", "cancel",
        // Utility networks.
        "updatesubnetwork", "enabletopology", "disabletopology", "validatenetworktopology",
        // Portal items, groups and users; service and site administration.
        "update", "additem", "updateitem", "deleteitems", "move", "moveitems", "share", "shareitems", "unshare",
        "unshareitems", "protect", "unprotect", "createfolder", "addrelationship", "deleterelationship",
        "addresources", "updateresources", "removeresources", "publish", "createservice", "addtodefinition",
        "updatedefinition", "deletefromdefinition", "adduser", "addusers", "createuser", "deleteusers", "removeusers",
        "updateusers", "enable", "disable", "invite", "join", "leave", "reassign", "edit", "start", "stop",
        "register", "unregister",
    ]

    /// Verbs an edit's name begins with (`addFeatures`, `deleteItems`, `updateSubnetwork`, `enableTopology`, …): a
    /// list of edits fails open when ArcGIS adds one, so any operation named with one of them is an edit, and this
    /// is what ``isEdit(path:)`` compares (every name in ``edits`` begins with one; unit-tested). None of
    /// ``serviceReads`` or ``portalReads`` begins with one; a read caught by mistake loses only a retry.
    static let editVerbs: [String] = [
        "add", "update", "delete", "remove", "apply", "create", "edit", "move", "share", "unshare", "protect",
        "unprotect", "enable", "disable", "start", "stop", "cancel", "submit", "execute", "register", "unregister",
        "reconcile", "purge", "restore", "truncate", "append", "calculate", "alter", "reassign", "invite", "publish",
        "overwrite", "import", "synchronize", "validate", "rebuild", "reset", "set", "post", "join", "leave",
    ]

    /// The operation `path` names, as a server reads it: up to any `?`, percent-decoded once (as ArcGIS and its
    /// web adaptor decode; `\\` and an encoded `/` separate segments too), each segment without its `;`
    /// parameters, dot-segments resolved (RFC 3986 §5.2.4: `deleteFeatures/.`, `deleteFeatures/%2e` and
    /// `deleteFeatures/x/..` are `deleteFeatures` to Tomcat and IIS), the last non-empty segment lowercased.
    static func operation(path: Substring) -> String? {
        lastSegment(of: path) { String(decoding: $0, as: UTF8.self) }
    }

    /// Calls `body` with the lowercased bytes of the operation `path` names (see ``operation(path:)``); nil when
    /// it names none. Runs for every request (``isEdit(path:)``): nearly every path has no escape, parameter,
    /// backslash or dot-segment, and its last segment is lowercased on the stack, without an allocation.
    static func lastSegment<R>(of path: Substring, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R? {
        let scan = path.utf8.withContiguousStorageIfAvailable { buf -> SimpleScan<R> in
            var previous: UInt8 = 0
            var start = 0
            var stop = buf.count
            for i in 0..<buf.count {
                let b = buf[i]
                if b == UInt8(ascii: "?") {
                    stop = i
                    break
                }
                if b == UInt8(ascii: "%") || b == UInt8(ascii: ";") || b == UInt8(ascii: "\\")
                    || (b == UInt8(ascii: ".") && previous == UInt8(ascii: "/"))
                {
                    return .needsResolving
                }
                if b == UInt8(ascii: "/"), i + 1 < buf.count, buf[i + 1] != UInt8(ascii: "/"),
                    buf[i + 1] != UInt8(ascii: "?")
                {
                    start = i + 1
                }
                previous = b
            }
            var end = stop
            while end > start, buf[end - 1] == UInt8(ascii: "/") { end -= 1 }
            guard end > start, start < stop else { return .last(nil) }
            let n = end - start
            return .last(
                withUnsafeTemporaryAllocation(of: UInt8.self, capacity: n) { lower in
                    for i in 0..<n {
                        let b = buf[start + i]
                        lower[i] = b >= 0x41 && b <= 0x5A ? b | 0x20 : b
                    }
                    return body(UnsafeBufferPointer(lower))
                })
        }
        if case .last(let r)? = scan { return r }
        // Decoded once, `\\` as `/`, then split, parameters dropped, dot-segments resolved.
        let u = path.utf8.prefix { $0 != UInt8(ascii: "?") }
        var decoded: [UInt8] = []
        decoded.reserveCapacity(u.count)
        var i = u.startIndex
        while i != u.endIndex {
            var b = u[i]
            i = u.index(after: i)
            if b == UInt8(ascii: "%"), i != u.endIndex, let hi = hexDigitValue(u[i]) {
                let j = u.index(after: i)
                if j != u.endIndex, let lo = hexDigitValue(u[j]) {
                    b = hi << 4 | lo
                    i = u.index(after: j)
                }
            }
            decoded.append(b == UInt8(ascii: "\\") ? UInt8(ascii: "/") : b)
        }
        var segments: [ArraySlice<UInt8>] = []
        for raw in decoded.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false) {
            let segment = raw.prefix { $0 != UInt8(ascii: ";") }
            if segment.elementsEqual([UInt8(ascii: ".")]) { continue }
            if segment.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")]) {
                // Empty segments (a trailing or doubled slash) are skipped when naming the operation, so they go too.
                while let last = segments.last, last.isEmpty { segments.removeLast() }
                if !segments.isEmpty { segments.removeLast() }
                continue
            }
            segments.append(segment)
        }
        guard let last = segments.last(where: { !$0.isEmpty }) else { return nil }
        let lower = last.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }
        return lower.withUnsafeBufferPointer(body)
    }

    /// What the quick look at a path found (``lastSegment(of:_:)``).
    private enum SimpleScan<R> {
        /// The path has nothing to decode or resolve: what `body` made of its last segment (nil: none).
        case last(R?)
        case needsResolving
    }

    /// Whether `path` names an ArcGIS REST read the proxy may send as a `POST` form.
    static func isConvertibleRead(path: Substring) -> Bool {
        guard let op = operation(path: path) else { return false }
        let lower = path.lowercased()
        if lower.contains("/rest/services/") { return serviceReads.contains(op) }
        if lower.contains("/sharing/rest/") { return portalReads.contains(op) }
        return false
    }

    /// Whether `path` names an operation that must not be sent twice (see the type's comment). Judged on any host,
    /// by the operation's name alone: a `…/delete` elsewhere is left unrepeated too, which costs at most a retry.
    static func isEdit(path: Substring) -> Bool {
        lastSegment(of: path) { name in
            guard let first = name.first else { return false }
            return editVerbsByFirstByte[Int(first)].contains { verb in
                name.count >= verb.count && verb.indices.allSatisfy { name[$0] == verb[$0] }
            }
        } ?? false
    }

    /// ``editVerbs`` by their first byte, as bytes: a name is compared with the few verbs that begin as it does.
    private static let editVerbsByFirstByte: [[[UInt8]]] = {
        var table = [[[UInt8]]](repeating: [], count: 256)
        for verb in editVerbs { table[Int(verb.utf8.first!)].append(Array(verb.utf8)) }
        return table
    }()
}
