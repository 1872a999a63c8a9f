/// Where a request goes first, decided by ``RequestPlanner/route(_:tunnel:ownAuthorities:)`` from its target alone.
enum RequestRoute: Equatable {
    /// One of the proxy's own endpoints (`/healthz`, `/proxy?…`), by path and query.
    case ownEndpoint(String)
    /// CONNECT to `host:port`.
    case tunnel(host: String, port: Int)
    /// A request to forward, to this URL (``RequestPlanner/plan(_:url:store:settings:into:)`` decides how).
    case forward(URLTarget)
    /// Refused before anything else, and the connection closed.
    case refuse(ErrorResponse)
}
