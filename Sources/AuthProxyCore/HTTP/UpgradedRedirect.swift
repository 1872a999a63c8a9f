/// Keeps a client that `upgrade_to_https` serves on its `http://` URLs when the server redirects.
///
/// The client asked for `http://gis.example.com/arcgis/rest` and the proxy sent it upstream as `https://`; a
/// server that redirects answers with its own scheme (`Location: https://gis.example.com/arcgis/rest/services`,
/// as ArcGIS Server's REST root and trailing-slash redirects do). Relayed as is, that URL takes the client off
/// the proxy's upgrade: a client with only `HTTP_PROXY` goes straight to the server, without the credential
/// (499), and one with `HTTPS_PROXY` opens a tunnel the proxy cannot inject into without interception. So a
/// redirect to the upgraded origin is written back to the origin the client used (`https://host` →
/// `http://host`, `:443` → `:80` as the upgrade maps them, other ports kept) — only when the new URL is itself
/// upgraded by a credential, so a redirect never sends a client to plain http where the proxy would relay it
/// as plain http. Everything after the authority stays byte for byte.
enum UpgradedRedirect {
    /// `value` (a `Location` or `Content-Location` URL, or a `Refresh` value `0; url=…`) with the upgraded
    /// origin `upstream` replaced by `client`'s; nil when it names another place (or a relative URL, which the
    /// client resolves against its own URL anyway), or when `isUpgraded` says the rewritten URL would not be
    /// upgraded.
    static func rewrite(
        _ value: UnsafeRawBufferPointer, upstream: URLTarget, client: URLTarget, isUpgraded: (URLTarget) -> Bool
    ) -> [UInt8]? {
        guard let start = urlStart(value) else { return nil }
        let https = Array("https://".utf8)
        guard value.count - start > https.count,
            zip(value[start...], https).allSatisfy({ lower($0) == $1 })
        else { return nil }
        let authorityStart = start + https.count
        let rest = value[authorityStart...]
        let authorityEnd =
            rest.firstIndex { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }
            ?? value.count
        let authority = String(decoding: value[authorityStart..<authorityEnd], as: UTF8.self)
        guard !authority.contains("@"),
            case let (host, port)? = (try? RequestHeadParser.parseAuthority(Substring(authority))) ?? nil,
            host.lowercased() == upstream.host.lowercased(), (port ?? 443) == upstream.port
        else { return nil }
        var tail = String(decoding: value[authorityEnd...], as: UTF8.self)
        if !tail.hasPrefix("/") { tail = "/" + tail }
        let target = URLTarget(scheme: "http", host: client.host, port: client.port, pathAndQuery: tail)
        guard isUpgraded(target) else { return nil }
        let origin = client.port == 80 ? "http://\(client.urlHost)" : "http://\(client.urlHost):\(client.port)"
        return Array(value[..<start]) + Array(origin.utf8) + Array(value[authorityEnd...])
    }

    /// Where the URL begins: at 0, or after `url=` in a `Refresh` value.
    private static func urlStart(_ v: UnsafeRawBufferPointer) -> Int? {
        if v.first.map(lower) == UInt8(ascii: "h") { return 0 }
        let key = Array("url=".utf8)
        guard v.count >= key.count else { return nil }
        for i in 0...(v.count - key.count) where (0..<key.count).allSatisfy({ lower(v[i + $0]) == key[$0] }) {
            var j = i + key.count
            while j < v.count, v[j] == UInt8(ascii: " ") { j += 1 }
            return j
        }
        return nil
    }

    private static func lower(_ b: UInt8) -> UInt8 {
        b >= UInt8(ascii: "A") && b <= UInt8(ascii: "Z") ? b | 0x20 : b
    }
}
