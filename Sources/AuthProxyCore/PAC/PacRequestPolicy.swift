/// Who may read the served PAC file (`/proxy.pac`, `/wpad.dat`). Pure decisions.
///
/// The file lists every host and port the proxy holds credentials for, and it is JavaScript: a web page that
/// includes it with `<script src>` would run it, and one that rebinds its own name to the proxy's address could
/// read it. So, besides `X-Content-Type-Options: nosniff` (a browser then refuses to run it as a script) and a
/// script that defines no global but `FindProxyForURL` (``PacScriptBuilder``):
/// - **Host**: the authority must name the listener, as on the admin listener (``AdminRequestPolicy``): an IP
///   literal, `localhost`, or a listed name (on the proxy listener `pac_address`'s host and `[proxy] pac_hosts`;
///   on the admin listener `[admin] hosts`). A rebound name is answered 421.
/// - **Fetch metadata**: a request a page made for another site (`Sec-Fetch-Site: cross-site` or `same-site`) or
///   to run as a script or worker (`Sec-Fetch-Dest`) is refused with 403. Browsers fetch their PAC file without
///   these fields, and a tab or `fetch` of the proxy's own origin sends `same-origin` or `none`.
enum PacRequestPolicy {
    struct Refusal: Equatable {
        var status: Int
        var message: String
    }

    /// The destinations `Sec-Fetch-Dest` names when a page would run the answer as code.
    static let scriptDestinations: Set<String> = ["script", "worker", "sharedworker", "serviceworker"]

    /// Why the request is refused, or nil to serve it. `names`: the listed names, lowercased.
    static func refusal(host: String?, secFetchSite: String?, secFetchDest: String?, names: Set<String>)
        -> Refusal?
    {
        if let host, !AdminRequestPolicy.namesListener(host, names: names) {
            let shown = host.isEmpty ? "(empty)" : "'\(String(host.prefix(100)))'"
            return Refusal(
                status: 421,
                message: "misdirected request: Host \(shown) does not name this proxy. The PAC file is served to "
                    + "requests addressed to an IP address, localhost, pac_address's host or a name in "
                    + "[proxy] pac_hosts (a guard against DNS rebinding from web pages)")
        }
        if let site = secFetchSite?.trimmingHTTPWhitespace().lowercased(), site == "cross-site" || site == "same-site" {
            return Refusal(
                status: 403,
                message: "refused: the PAC file is not served to another site's page (Sec-Fetch-Site: \(site))")
        }
        if let dest = secFetchDest?.trimmingHTTPWhitespace().lowercased(), scriptDestinations.contains(dest) {
            return Refusal(
                status: 403,
                message: "refused: the PAC file is not served to be run by a page (Sec-Fetch-Dest: \(dest))")
        }
        return nil
    }

    /// The names the proxy listener answers the PAC file for: `[proxy] pac_hosts` and `pac_address`'s host.
    static func proxyListenerNames(pacHosts: [String], pacAddress: String?) -> Set<String> {
        var names = Set(pacHosts.map { $0.lowercased() })
        if let a = pacAddress, let (host, _) = AdminRequestPolicy.splitAuthority(a), !host.hasPrefix("[") {
            names.insert(host.lowercased())
        }
        return names
    }
}
