/// The URL a `/proxy?<url>` request (the ArcGIS Maps SDK for JavaScript's `proxyUrl`) asks for.
///
/// The SDK appends the URL as it is: `/proxy?https://host/arcgis/rest/services/x/MapServer/export?bbox=…&f=image`.
/// Many apps, and the OpenLayers/Leaflet recipes written for Esri's resource-proxy (which decodes it), send it
/// percent-encoded instead, as `encodeURIComponent` makes it: `/proxy?https%3A%2F%2Fhost%2Farcgis%2F…%3Ff%3Djson`.
/// Both forms name the same URL.
enum ProxyEndpointTarget {
    /// The URL text in the query of a `/proxy` request target: the query itself, or, when it starts with an
    /// encoded `http:`/`https:` (`http%3A`), the query percent-decoded once (a `%25` becomes `%`, so the fields of
    /// the URL keep their own encoding). nil for an encoded form that does not decode to a request target
    /// (a malformed `%` escape, or a control character, space or non-ASCII byte that a request line could not
    /// carry): such a request is refused rather than forwarded differently from what the app meant.
    static func url(fromQuery query: Substring) -> String? {
        let u = Array(query.utf8)
        guard isEncodedURL(u) else { return String(query) }
        var out: [UInt8] = []
        out.reserveCapacity(u.count)
        var i = 0
        while i < u.count {
            var b = u[i]
            if b == UInt8(ascii: "%") {
                guard i + 2 < u.count, let h = hexValue(u[i + 1]), let l = hexValue(u[i + 2]) else { return nil }
                b = h << 4 | l
                i += 3
            } else {
                i += 1
            }
            guard b > 0x20, b < 0x7F else { return nil }
            out.append(b)
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// `http%3A` or `https%3A`, in any case.
    private static func isEncodedURL(_ u: [UInt8]) -> Bool {
        for scheme in ["http%3a", "https%3a"] {
            let s = Array(scheme.utf8)
            if u.count > s.count, zip(u, s).allSatisfy({ $0 | 0x20 == $1 | 0x20 }) { return true }
        }
        return false
    }

    private static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
