/// What the admin listener answers, decided from an ``AdminRequest`` alone (no sockets): the admin listener's routes over an ``AdminBackend``, behind ``AdminRequestPolicy``'s Host and cross-site checks.
enum AdminRouter {
    struct Response: Equatable {
        var status: Int
        var contentType: String
        var body: [UInt8]
        var extraHeaders: [(String, String)] = []

        static func == (a: Response, b: Response) -> Bool {
            a.status == b.status && a.contentType == b.contentType && a.body == b.body
                && a.extraHeaders.map { "\($0.0):\($0.1)" } == b.extraHeaders.map { "\($0.0):\($0.1)" }
        }

        static func text(_ status: Int, _ s: String) -> Response {
            Response(status: status, contentType: "text/plain; charset=utf-8", body: Array(s.utf8))
        }

        static func json(_ status: Int, _ s: String) -> Response {
            Response(status: status, contentType: "application/json; charset=utf-8", body: Array(s.utf8))
        }
    }

    /// The Prometheus text format version 0.0.4 content type.
    static let prometheusContentType = "text/plain; version=0.0.4; charset=utf-8"

    /// `hosts`: `[admin] hosts`, lowercased.
    static func route(_ request: AdminRequest, hosts: Set<String>, backend: any AdminBackend) -> Response {
        // Before any route: a page that rebound its name to this address must learn nothing, not even 404s.
        if let refusal = AdminRequestPolicy.hostRefusal(request, names: hosts) { return refusal }
        let method = request.method
        let path = String(request.target.prefix { $0 != "?" })
        let get = method == "GET" || method == "HEAD"
        switch path {
        case "/healthz":
            guard get else { return methodNotAllowed("GET, HEAD") }
            return .text(200, "ok\n")
        case "/readyz":
            guard get else { return methodNotAllowed("GET, HEAD") }
            let r = backend.readiness()
            return .json(r.ready ? 200 : 503, r.json)
        case "/metrics":
            guard get else { return methodNotAllowed("GET, HEAD") }
            return Response(status: 200, contentType: prometheusContentType, body: backend.metricsExposition())
        case "/", "/index.html":
            guard get else { return methodNotAllowed("GET, HEAD") }
            return Response(
                status: 200, contentType: "text/html; charset=utf-8",
                body: Array(StatusPage.render(backend.statusReport()).utf8))
        case "/status.json":
            guard get else { return methodNotAllowed("GET, HEAD") }
            return .json(200, backend.statusJSON())
        case "/proxy.pac", "/wpad.dat":
            let (settings, listeners) = backend.pacInputs()
            if let refusal = PacRequestPolicy.refusal(
                host: request.host, secFetchSite: request.secFetchSite, secFetchDest: request.secFetchDest, names: hosts
            ) {
                return Response(
                    status: refusal.status, contentType: "text/plain; charset=utf-8",
                    body: Array((refusal.message + "\n").utf8))
            }
            if let client = request.client, !settings.allowClients.contains(client) {
                return .text(403, "refused: the PAC file is served to clients in [proxy] allow_clients only\n")
            }
            let a = PacEndpoint.answer(
                method: method, ifNoneMatch: request.ifNoneMatch,
                address: PacEndpoint.adminAddress(settings: settings, listeners: listeners, requestHost: request.host),
                settings: settings)
            return Response(
                status: a.status, contentType: a.contentType, body: Array(a.body.utf8),
                // The admin listener sends nosniff on every answer already.
                extraHeaders: a.headers.filter { $0.0 != "X-Content-Type-Options" })
        case "/reload":
            guard method == "POST" else { return methodNotAllowed("POST") }
            if let refusal = AdminRequestPolicy.reloadRefusal(request) { return .text(403, refusal + "\n") }
            let outcome = backend.reload(trigger: "POST /reload")
            return .json(
                outcome.applied ? 200 : 422,
                "{\"applied\":\(outcome.applied),\"message\":\"\(jsonEscaped(outcome.message))\"}\n")
        case "/quitquitquit" where backend.quitquitquitEnabled:
            guard method == "POST" else { return methodNotAllowed("POST") }
            if let refusal = AdminRequestPolicy.quitRefusal(request) { return .text(403, refusal + "\n") }
            backend.requestShutdown(trigger: "POST /quitquitquit")
            return .text(200, "shutting down\n")
        default:
            return .text(
                404,
                "not found: the admin listener serves /, /status.json, /metrics, /healthz, /readyz, /proxy.pac and POST /reload\n"
            )
        }
    }

    private static func methodNotAllowed(_ allow: String) -> Response {
        var r = Response.text(405, "method not allowed (use \(allow))\n")
        r.extraHeaders = [("Allow", allow)]
        return r
    }
}

/// What the admin listener reads from the running proxy (``ProxyServer`` implements it). Called on the admin
/// listener's queue.
protocol AdminBackend: AnyObject, Sendable {
    func readiness() -> Readiness
    func statusReport() -> StatusReport
    /// ``statusReport()`` as JSON.
    func statusJSON() -> String
    func metricsExposition() -> [UInt8]
    /// Reloads the configuration (same as SIGHUP): whether it was applied, and what happened.
    func reload(trigger: String) -> (applied: Bool, message: String)
    /// `[admin] quitquitquit = true` in the generation in force.
    var quitquitquitEnabled: Bool { get }
    /// Starts the same shutdown as SIGTERM (``ProxyServer/onShutdownRequest(_:)``).
    func requestShutdown(trigger: String)
    /// What the PAC file is made from: the generation in force, and the proxy listeners with their bound ports.
    func pacInputs() -> (settings: PacEndpoint.Settings, listeners: [ListenAddress])
}

extension AdminBackend {
    /// Off unless the backend says otherwise (test backends without a process to stop).
    var quitquitquitEnabled: Bool { false }
    func requestShutdown(trigger: String) {}
}
