/// What the `/proxy?<url>` endpoint does with a request, decided by
/// ``RequestPlanner/proxyEndpoint(_:target:allowedOrigins:store:)``.
enum ProxyEndpointDecision: Equatable {
    /// Refused (the endpoint is off, no or a foreign origin, no URL, JSONP). `origin`: an allowed web app's, whose
    /// script may read the error (answered in `Access-Control-Allow-Origin`); nil before the origin is known good.
    case refuse(ErrorResponse, origin: String?)
    /// A CORS preflight from an allowed origin, answered by the proxy (204) with these headers.
    case preflight(origin: String?, extraHeaders: String)
    /// Forwarded to `url` like any proxied request; `origin` is answered in `Access-Control-Allow-Origin`.
    case forward(URLTarget, origin: String?)
}
