/// The ArcGIS Maps SDK for JavaScript `proxyUrl` form: `GET /proxy?https://server/path?query`. Browsers cannot be
/// pointed at a forward proxy per request, so web apps send their requests here. Any web page could otherwise make
/// the browser spend the proxy's credentials, so the endpoint only exists with `[proxy] allowed_origins` or
/// `[[app]]` entries, and a request from another origin is refused. An `[[app]]` origin is admitted with that app's
/// credentials only (chosen by the caller, ``WebAppAccess``).
extension RequestPlanner {
    static func proxyEndpoint(
        _ h: RequestHead, target: String, allowedOrigins allowed: [String], store: CredentialStore,
        apps: WebAppDirectory = WebAppDirectory([])
    )
        -> ProxyEndpointDecision
    {
        guard !allowed.isEmpty || !apps.isEmpty else {
            return .refuse(
                ErrorResponse(
                    status: 404, message: "The /proxy endpoint is off",
                    details: ["Set [proxy] allowed_origins, or add [[app]] entries, for the web apps that may use it."]),
                origin: nil)
        }
        let origin = h.headers.first("origin")
        // A request with neither Origin nor Referer could come from any page: refused.
        guard let requester = proxyEndpointOrigin(h) else {
            return .refuse(
                ErrorResponse(
                    status: 403, message: "The /proxy endpoint needs an Origin or Referer header",
                    details: ["Only the web apps in [proxy] allowed_origins or [[app]] origins may use it."]),
                origin: nil)
        }
        if apps.app(forOrigin: requester) == nil, !allowed.contains("*"),
            !allowed.contains(where: { $0.lowercased() == requester.lowercased() })
        {
            return .refuse(
                ErrorResponse(
                    status: 403, message: "Origin \(requester.prefix(200)) may not use this proxy",
                    details: ["It is neither in [proxy] allowed_origins nor the origin of an [[app]]."]), origin: nil)
        }
        if h.method == "OPTIONS", h.headers.contains("access-control-request-method") {
            // CORS preflight, answered here (the upstream never sees it).
            var extra = "Access-Control-Allow-Methods: GET, POST, HEAD, OPTIONS\r\nAccess-Control-Max-Age: 600\r\n"
            if let wanted = h.headers.first("access-control-request-headers") {
                extra += "Access-Control-Allow-Headers: \(wanted.filter { $0 != "\r" && $0 != "\n" })\r\n"
            }
            return .preflight(origin: origin, extraHeaders: extra)
        }
        guard let q = target.firstIndex(of: "?"),
            let text = ProxyEndpointTarget.url(fromQuery: target[target.index(after: q)...]),
            case .absolute(let url)? = try? RequestHeadParser.parseTarget(method: h.method, text)
        else {
            return .refuse(
                ErrorResponse(
                    status: 400, message: "Expected /proxy?<http(s) URL>",
                    details: [
                        "The URL as is (/proxy?https://host/path?f=json) or percent-encoded as a whole (/proxy?https%3A%2F%2Fhost%2Fpath%3Ff%3Djson)."
                    ]),
                origin: origin)
        }
        if TokenInjection.queryHasField(url.pathAndQuery, "callback"), !jsonpAllowed(url, store: store) {
            // JSONP is read with <script src>, which any page can include: a secured answer would leak to it.
            return .refuse(
                ErrorResponse(
                    status: 403, message: "JSONP (callback=) is not allowed through the /proxy endpoint",
                    details: [
                        "Set allow_jsonp = true on the credential matching \(url.origin) if a web app really needs JSONP."
                    ]),
                origin: origin)
        }
        return .forward(url, origin: origin)
    }

    /// The web app a `/proxy` request comes from: its `Origin`, or the origin of its `Referer` when a browser sends
    /// no Origin (`<script src>` and `<img>` GETs).
    static func proxyEndpointOrigin(_ h: RequestHead) -> String? {
        h.headers.first("origin") ?? h.headers.first("referer").flatMap(webOrigin(of:))
    }

    /// JSONP may pass only when every credential that would authenticate the request, selected by the raw path or
    /// the normalised one (`/public/../secure`), allows it, and there is at least one.
    static func jsonpAllowed(_ url: URLTarget, store: CredentialStore) -> Bool {
        var targets = [url]
        if case .normal(let p) = PathNormalizer.normalize(url.path), p != url.path {
            targets.append(url.replacingPath(p))
        }
        let applied = targets.flatMap { store.applicable(for: $0) }.filter { c in
            c.kind.role != .network(.trust)  // trust settings authenticate nobody
        }
        return !applied.isEmpty && applied.allSatisfy(\.allowJSONP)
    }

    /// `scheme://host[:port]` of a URL (the port only when not the scheme's default), as browsers write origins.
    static func webOrigin(of url: String) -> String? {
        guard let u = HTTPURL.parse(url)?.target else { return nil }
        return u.isDefaultPort ? "\(u.scheme)://\(u.urlHost)" : "\(u.scheme)://\(u.urlHost):\(u.port)"
    }
}
