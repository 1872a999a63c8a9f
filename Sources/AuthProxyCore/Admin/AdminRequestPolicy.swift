/// Who may use the admin listener from a browser. Pure decisions over an ``AdminRequest``.
///
/// **Host.** A web page can rebind its own DNS name to 127.0.0.1 and then read the admin listener with the
/// browser's same-origin blessing (its requests carry `Host: attacker.example`). So a request is served only
/// when its authority names the listener: an IP literal (an IP-literal origin cannot be rebound, and Kubernetes
/// probes send the pod IP), `localhost`, or a name listed in `[admin] hosts`. The port is ignored: the attacker's
/// origin differs by *name*, and a port-forward or a Service legitimately changes the port the client saw.
/// HTTP/1.0 without `Host` is served (no browser sends that; old probes and `nc` do).
///
/// **POST /reload.** Refused when the request says it came from another site (`Origin` other than the
/// listener's own `http://` origin, `Origin: null`, a `Referer` from elsewhere, `Sec-Fetch-Site` other than
/// `same-origin`/`none`), and unless it is a request a page cannot send without a CORS preflight (which the
/// admin listener never grants): one with a header named `X-…`, or a `Content-Type` outside the three a form
/// or a simple `fetch` may send.
enum AdminRequestPolicy {
    /// The recipe the refusals and docs/operations.md give.
    static let reloadRecipe = "curl -X POST -H 'X-Authproxy-Reload: 1' http://127.0.0.1:<port>/reload"

    /// The Content-Types a cross-site form or `fetch` may send without a preflight (Fetch standard).
    static let corsSafelistedContentTypes: Set<String> = [
        "application/x-www-form-urlencoded", "multipart/form-data", "text/plain",
    ]

    /// A 421 when the request's authority does not name the admin listener, else nil. `names`: `[admin] hosts`,
    /// lowercased.
    static func hostRefusal(_ r: AdminRequest, names: Set<String>) -> AdminRouter.Response? {
        guard let host = r.host else { return nil }
        if namesListener(host, names: names) { return nil }
        let shown = host.isEmpty ? "(empty)" : "'\(String(host.prefix(100)))'"
        return .text(
            421,
            "misdirected request: Host \(shown) does not name this admin listener. It answers requests addressed "
                + "to an IP address or localhost; add other names it is reached by to [admin] hosts "
                + "(a guard against DNS rebinding from web pages)\n")
    }

    /// Whether the authority `host` (`name`, `name:port`, `1.2.3.4:port`, `[::1]:port`) names the listener.
    static func namesListener(_ host: String, names: Set<String>) -> Bool {
        guard let (name, _) = splitAuthority(host) else { return false }
        if name.hasPrefix("[") {
            // Only an IPv6 literal is written in brackets.
            let inner = String(name.dropFirst().dropLast())
            return inner.contains(":") && IPAddress.parse(inner) != nil
        }
        // An unbracketed IPv6 literal is not a valid authority; inet_pton accepts only dotted quads for IPv4.
        if !name.contains(":"), IPAddress.parse(name) != nil { return true }
        let lower = name.lowercased()
        return lower == "localhost" || names.contains(lower)
    }

    /// `(host, port)` of an authority; the port nil when absent. nil when malformed.
    static func splitAuthority(_ a: String) -> (host: String, port: Int?)? {
        guard !a.isEmpty, !a.contains("@"), !a.contains("/") else { return nil }
        var host = Substring(a)
        var portText: Substring? = nil
        if a.hasPrefix("[") {
            guard let close = a.firstIndex(of: "]") else { return nil }
            host = a[...close]
            let rest = a[a.index(after: close)...]
            if !rest.isEmpty {
                guard rest.first == ":" else { return nil }
                portText = rest.dropFirst()
            }
        } else if let colon = a.lastIndex(of: ":") {
            host = a[..<colon]
            portText = a[a.index(after: colon)...]
            // More than one colon outside brackets: an unbracketed IPv6 literal, not an authority.
            if host.contains(":") { return nil }
        }
        guard !host.isEmpty else { return nil }
        var port: Int? = nil
        if let portText, !portText.isEmpty {
            guard portText.count <= 5, portText.allSatisfy({ $0.isASCII && $0.isNumber }), let n = Int(portText),
                n <= 65535
            else { return nil }
            port = n
        }
        return (String(host), port)
    }

    /// Why a `POST /reload` is refused (the 403 body), or nil to accept it.
    static func reloadRefusal(_ r: AdminRequest) -> String? {
        postRefusal(r, action: "POST /reload", header: "X-Authproxy-Reload", recipe: reloadRecipe)
    }

    /// The recipe for `POST /quitquitquit`.
    static let quitRecipe = "curl -X POST -H 'X-Authproxy-Quit: 1' http://127.0.0.1:<port>/quitquitquit"

    /// Why a `POST /quitquitquit` is refused (the 403 body), or nil to accept it: the same rules as `POST /reload`.
    static func quitRefusal(_ r: AdminRequest) -> String? {
        postRefusal(r, action: "POST /quitquitquit", header: "X-Authproxy-Quit", recipe: quitRecipe)
    }

    /// Why a state-changing `action` is refused (the 403 body), or nil to accept it.
    private static func postRefusal(_ r: AdminRequest, action: String, header: String, recipe: String) -> String? {
        if let origin = r.origin {
            if origin.lowercased() == "null" {
                return "refused: \(action) from an opaque origin (Origin: null, a sandboxed or file: page)"
            }
            guard let host = r.host, sameOrigin(origin, host: host, allowPath: false) else {
                return "refused: \(action) with Origin '\(String(origin.prefix(100)))', which is not this admin "
                    + "listener's own origin (a cross-site request)"
            }
        }
        if let referer = r.referer {
            guard let host = r.host, sameOrigin(referer, host: host, allowPath: true) else {
                return "refused: \(action) with a Referer from another origin (a cross-site request)"
            }
        }
        if let site = r.secFetchSite?.lowercased(), site != "same-origin", site != "none" {
            return "refused: \(action) with Sec-Fetch-Site: \(String(site.prefix(40))) (only same-origin or none)"
        }
        let customHeader = r.headerNames.contains { $0.count > 2 && $0.lowercased().hasPrefix("x-") }
        var preflightedType = false
        if let ct = r.contentType {
            let media = ct.prefix { $0 != ";" }.trimmingHTTPWhitespace().lowercased()
            preflightedType = !media.isEmpty && !corsSafelistedContentTypes.contains(media)
        }
        guard customHeader || preflightedType else {
            return "refused: \(action) needs a header named X-… (e.g. \(header): 1) or a non-form "
                + "Content-Type, so a web page cannot send it: \(recipe)"
        }
        return nil
    }

    /// Whether `url` (an `Origin`, or a `Referer` when `allowPath`) is `http://` + the authority `host`, comparing
    /// names case-insensitively and an absent port as 80.
    static func sameOrigin(_ url: String, host: String, allowPath: Bool) -> Bool {
        let scheme = "http://"
        guard url.count > scheme.count, url.prefix(scheme.count).lowercased() == scheme else { return false }
        let rest = url.dropFirst(scheme.count)
        let end = rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex
        if !allowPath, end != rest.endIndex { return false }
        guard let a = splitAuthority(String(rest[..<end])), let b = splitAuthority(host) else { return false }
        return a.host.lowercased() == b.host.lowercased() && (a.port ?? 80) == (b.port ?? 80)
    }
}
