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
    static let edits: Set<String> = [
        // Feature services and layers.
        "applyedits", "addfeatures", "updatefeatures", "deletefeatures", "calculate", "append", "truncate",
        "addattachment", "updateattachment", "deleteattachments",
        // Branch and traditional versioning, replicas.
        "reconcile", "post", "purgelock", "alterversion", "create", "delete", "createreplica", "synchronizereplica",
        "unregisterreplica",
        // Image services.
        "add", "addrasters", "updaterasters", "deleterasters",
        // Geoprocessing: a tool may write anything.
        "execute", "submitjob",
        // Portal items, groups and users; service and site administration.
        "update", "additem", "updateitem", "deleteitems", "move", "share", "unshare", "publish", "createservice",
        "addtodefinition", "updatedefinition", "deletefromdefinition", "adduser", "addusers", "removeusers",
        "updateusers", "invite", "join", "leave", "reassign", "edit", "start", "stop", "register", "unregister",
    ]

    /// The last non-empty segment of `path` (no query) as a server reads it: without `;` path parameters,
    /// percent-decoded (once, as ArcGIS and its web adaptor decode; an encoded `/` or `\\` ends a segment there
    /// too), lowercased — so `deleteFeature%73`, `0%2FdeleteFeatures` and `DELETEFEATURES;x=1` are the edit they
    /// name.
    static func operation(path: Substring) -> String? {
        // Scanned from the end: this runs for every request (retry and resend decisions).
        let u = path.utf8
        var end = u.endIndex
        while end != u.startIndex, u[u.index(before: end)] == UInt8(ascii: "/") { end = u.index(before: end) }
        guard end != u.startIndex else { return nil }
        var start = end
        while start != u.startIndex, u[u.index(before: start)] != UInt8(ascii: "/") { start = u.index(before: start) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(u.distance(from: start, to: end))
        var previous: [UInt8] = []
        var i = start
        while i != end, u[i] != UInt8(ascii: ";") {
            var b = u[i]
            i = u.index(after: i)
            if b == UInt8(ascii: "%"), i != end, let hi = hexDigitValue(u[i]) {
                let j = u.index(after: i)
                if j != end, let lo = hexDigitValue(u[j]) {
                    b = hi << 4 | lo
                    i = u.index(after: j)
                }
            }
            // An encoded slash or backslash starts a new segment for a server that decodes before it splits.
            if b == UInt8(ascii: "/") || b == UInt8(ascii: "\\") {
                if !bytes.isEmpty { swap(&bytes, &previous) }
                bytes.removeAll(keepingCapacity: true)
                continue
            }
            bytes.append(b >= 0x41 && b <= 0x5A ? b | 0x20 : b)
        }
        return String(decoding: bytes.isEmpty ? previous : bytes, as: UTF8.self)
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
        operation(path: path).map { edits.contains($0) } ?? false
    }
}
