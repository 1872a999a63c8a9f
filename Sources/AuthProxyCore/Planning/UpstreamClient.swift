/// Which HTTP client carries a forwarded request upstream, decided with its plan (``ForwardPlan/client``).
enum UpstreamClient: Equatable {
    /// The proxy's own HTTP/1.1 client (``HTTP1Transfer``), over a ``Connector`` connection.
    case own
    /// A libcurl transfer (``CurlTransfer``), which connects itself.
    case libcurl

    /// libcurl stays where it is the point: `http_client = "libcurl"`, a login whose handshake binds to libcurl's
    /// connection (a password that allows NTLM, or a Kerberos identity for Negotiate; ``NetworkAuth/needsLibcurl``),
    /// and plain http through a parent whose login is answered from its 407
    /// (``ParentRouting/ownClientForwards(through:)``; an `https` parent is reached over the connector's TLS, and a
    /// SOCKS parent tunnels the request on the own client). A password whose schemes are Basic and/or Digest goes
    /// with the own client: Basic is one header sent before any challenge, Digest answers the 401 on the same
    /// kept-alive connection and then logs in at once from the loop's session cache (``HTTP1Transfer``,
    /// ``DigestLogin``). A WebSocket handshake always goes over the own client,
    /// the one that hands its connection over after a `101` (``RequestPlanner/webSocketRefusal(network:)`` turns
    /// away those that would need libcurl), through a parent inside a CONNECT tunnel. A client certificate is
    /// presented by the connector's TLS (``CurlConnector``), for the own client as for a tunnel.
    static func choose(
        configured: HTTPClientChoice, network: NetworkAuth, route: ParentRoute?, upstreamScheme: String,
        isUpgrade: Bool
    ) -> UpstreamClient {
        if network.needsLibcurl { return .libcurl }
        if isUpgrade { return .own }
        if configured == .libcurl { return .libcurl }
        guard let route, upstreamScheme != "https" else { return .own }
        // A SOCKS parent carries the request inside its tunnel, as for https (``HTTP1Transfer`` writes the head for
        // the link the connector made).
        return route.candidates.allSatisfy { $0.scheme == .socks5h || route.routing.ownClientForwards(through: $0) }
            ? .own : .libcurl
    }
}
