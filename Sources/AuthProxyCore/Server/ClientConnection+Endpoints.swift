import CAuthProxyShims
import CCurl
import Dispatch
import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// The proxy's own endpoints: `/healthz`, the PAC file (`/proxy.pac`, `/wpad.dat`) and the ArcGIS JS `proxyUrl`
/// form (`/proxy?<url>`).
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
        case "/proxy.pac", "/wpad.dat":
            servePacFile()
        default:
            respond(
                ErrorResponse(
                    status: 404, message: "No such endpoint on this proxy: \(path.prefix(200))",
                    details: [
                        "Send requests in absolute form (configure this address as HTTP_PROXY), or GET /healthz or /proxy.pac."
                    ]), close: false)
        }
    }

    /// The PAC file (``PacEndpoint``): its `PROXY` address is `pac_address`, else the authority the client fetched
    /// it from, which reaches this listener.
    func servePacFile() {
        guard let h = ex?.head else { return }
        let host: String?
        switch h.target {
        case .absolute(let u): host = u.isDefaultPort ? u.urlHost : "\(u.urlHost):\(u.port)"
        default: host = h.headers.first("host")
        }
        let settings = context.pac
        if let refusal = PacRequestPolicy.refusal(
            host: host, secFetchSite: h.headers.first("sec-fetch-site"),
            secFetchDest: h.headers.first("sec-fetch-dest"),
            names: settings.proxyListenerNames)
        {
            let a = PacEndpoint.refused(refusal)
            respondLocal(
                status: a.status, contentType: a.contentType, body: a.body,
                extraHeaders: a.headers.map { "\($0.0): \($0.1)\r\n" }.joined())
            return
        }
        let a = PacEndpoint.answer(
            method: h.method, ifNoneMatch: h.headers.first("if-none-match"),
            address: PacEndpoint.address(settings: settings, hostHeader: host, listener: nil), settings: settings)
        respondLocal(
            status: a.status, contentType: a.contentType, body: a.body,
            extraHeaders: a.headers.map { "\($0.0): \($0.1)\r\n" }.joined())
    }

    /// The `/proxy?<url>` endpoint: ``RequestPlanner/proxyEndpoint(_:target:allowedOrigins:store:apps:)`` decides, and
    /// a forwarded request goes on like any proxied one (its body too), with its `[[app]]`'s credentials when it
    /// comes from one (after the user's sign-in, when the app requires it: ``webAppCredentials(app:afterKeyFetch:)``).
    /// `afterKeyFetch`: called again once the sign-in keys it waited for were fetched.
    func serveProxyEndpoint(_ target: String, afterKeyFetch: Bool = false) {
        guard let x = ex, let h = x.head else { return }
        // Every answer here depends on the Origin (or its absence): say so to browser caches.
        x.varyOrigin = true
        let apps = context.access.apps
        let app =
            apps.directory.isEmpty
            ? nil : RequestPlanner.proxyEndpointOrigin(h).flatMap { apps.directory.app(forOrigin: $0) }
        switch RequestPlanner.proxyEndpoint(
            h, target: target, allowedOrigins: context.config.allowedOrigins,
            store: app.map { apps.store(app: $0, rule: nil) } ?? credentials, apps: apps.directory)
        {
        case .refuse(let e, let origin):
            x.corsOrigin = origin
            respond(e, close: false)
        case .preflight(let origin, let extra):
            x.corsOrigin = origin
            respondLocal(status: 204, contentType: "text/plain", body: "", extraHeaders: extra)
        case .forward(let url, let origin):
            x.corsOrigin = origin
            if let app {
                guard let store = webAppCredentials(app: app, target: target, afterKeyFetch: afterKeyFetch) else {
                    return  // answered, or waiting for the issuer's keys
                }
                if x.savedCredentials == nil { x.savedCredentials = credentials }
                credentials = store
            }
            x.head?.target = .absolute(url)
            forward(url)
        }
    }
}
