import CAuthProxyShims
import CCurl
import Dispatch
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// The proxy's own endpoints: `/healthz` and the ArcGIS JS `proxyUrl` form (`/proxy?<url>`).
extension ClientConnection {
    func serveOwnEndpoint(_ target: String) {
        let path = target.prefix { $0 != "?" }
        if path == "/proxy" {
            serveProxyEndpoint(target)  // forwards the body like any proxied request
            return
        }
        // The other endpoints take no body; rather than read one, the connection closes after the answer (the
        // machine's rule for a local answer to a request whose body was not read).
        switch path {
        case "/healthz":
            guard ex?.head?.method == "GET" || ex?.head?.method == "HEAD" else {
                respond(ErrorResponse(status: 405, message: "Method not allowed on /healthz"), close: false)
                return
            }
            respondLocal(status: 200, contentType: "application/json", body: "{\"status\":\"ok\"}")
        default:
            respond(ErrorResponse(status: 404, message: "No such endpoint on this proxy: \(path.prefix(200))",
                details: ["Send requests in absolute form (configure this address as HTTP_PROXY), or GET /healthz."]), close: false)
        }
    }

    /// The ArcGIS Maps SDK for JavaScript `proxyUrl` form: `GET /proxy?https://server/path?query`. Browsers
    /// cannot be pointed at a forward proxy per request, so web apps send their requests here. Any web page
    /// could otherwise make the browser spend the proxy's credentials, so the endpoint only exists with
    /// `[proxy] allowed_origins`, and a request from another origin is refused.
    func serveProxyEndpoint(_ target: String) {
        guard let x = ex, let h = x.head else { return }
        // Every answer here depends on the Origin (or its absence): say so to browser caches.
        x.varyOrigin = true
        let allowed = context.config.allowedOrigins
        guard !allowed.isEmpty else {
            respond(ErrorResponse(status: 404, message: "The /proxy endpoint is off",
                details: ["Set [proxy] allowed_origins to the web app origins that may use it."]), close: false)
            return
        }
        // The requesting web app: its Origin, or the origin of its Referer when a browser sends no Origin
        // (`<script src>` and `<img>` GETs). A request with neither could come from any page: refused.
        let origin = h.headers.first("origin")
        guard let requester = origin ?? h.headers.first("referer").flatMap(Self.webOrigin(of:)) else {
            respond(ErrorResponse(status: 403, message: "The /proxy endpoint needs an Origin or Referer header",
                details: ["Only the web apps in [proxy] allowed_origins may use it."]), close: false)
            return
        }
        if !allowed.contains("*"), !allowed.contains(where: { $0.lowercased() == requester.lowercased() }) {
            respond(ErrorResponse(status: 403, message: "Origin \(requester.prefix(200)) may not use this proxy",
                details: ["It is not in [proxy] allowed_origins."]), close: false)
            return
        }
        x.corsOrigin = origin
        if h.method == "OPTIONS", h.headers.contains("access-control-request-method") {
            // CORS preflight, answered here (the upstream never sees it).
            var extra = "Access-Control-Allow-Methods: GET, POST, HEAD, OPTIONS\r\nAccess-Control-Max-Age: 600\r\n"
            if let wanted = h.headers.first("access-control-request-headers") {
                extra += "Access-Control-Allow-Headers: \(wanted.filter { $0 != "\r" && $0 != "\n" })\r\n"
            }
            respondLocal(status: 204, contentType: "text/plain", body: "", extraHeaders: extra)
            return
        }
        guard let q = target.firstIndex(of: "?"),
            let text = ProxyEndpointTarget.url(fromQuery: target[target.index(after: q)...]),
            case .absolute(let url)? = try? RequestHeadParser.parseTarget(method: h.method, text)
        else {
            respond(ErrorResponse(status: 400, message: "Expected /proxy?<http(s) URL>",
                details: ["The URL as is (/proxy?https://host/path?f=json) or percent-encoded as a whole (/proxy?https%3A%2F%2Fhost%2Fpath%3Ff%3Djson)."]),
                close: false)
            return
        }
        if TokenInjection.queryHasField(url.pathAndQuery, "callback"), !jsonpAllowed(url) {
            // JSONP is read with <script src>, which any page can include: a secured answer would leak to it.
            respond(ErrorResponse(status: 403, message: "JSONP (callback=) is not allowed through the /proxy endpoint",
                details: ["Set allow_jsonp = true on the credential matching \(url.origin) if a web app really needs JSONP."]),
                close: false)
            return
        }
        x.head?.target = .absolute(url)
        forward(url)
    }

    /// JSONP may pass only when every credential that would authenticate the request, selected by the raw
    /// path or the normalised one (`/public/../secure`), allows it, and there is at least one.
    func jsonpAllowed(_ url: URLTarget) -> Bool {
        var targets = [url]
        if case .normal(let p) = PathNormalizer.normalize(url.path), p != url.path { targets.append(url.replacingPath(p)) }
        let applied = targets.flatMap { credentials.applicable(for: $0) }.filter { c in
            if case .serverTrust = c.kind { return false }  // trust settings authenticate nobody
            return true
        }
        return !applied.isEmpty && applied.allSatisfy(\.allowJSONP)
    }

    /// `scheme://host[:port]` of a URL (the port only when not the scheme's default), as browsers write origins.
    static func webOrigin(of url: String) -> String? {
        guard let u = HTTPURL.parse(url)?.target else { return nil }
        return u.isDefaultPort ? "\(u.scheme)://\(u.urlHost)" : "\(u.scheme)://\(u.urlHost):\(u.port)"
    }
}
