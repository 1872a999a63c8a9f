/// Which HTTP client carries a forwarded request upstream, decided with its plan (``ForwardPlan/client``).
enum UpstreamClient: Equatable {
    /// The proxy's own HTTP/1.1 client (``HTTP1Transfer``), over a ``Connector`` connection.
    case own
    /// A libcurl transfer (``CurlTransfer``), which connects itself.
    case libcurl

    /// libcurl stays where it is the point: `http_client = "libcurl"`, a login answered from the server's challenge
    /// (a password with Digest or NTLM, or a Kerberos identity: libcurl picks the scheme from the 401, and NTLM and
    /// Negotiate bind to its connection; ``NetworkAuth/answersChallenges``), and plain http through a parent the
    /// own client cannot carry in absolute form (``ParentRouting/ownClientForwards(through:)``: one whose login is
    /// answered from its 407; a SOCKS parent tunnels the request on the own client). A Basic-only password goes with the own client: it is one
    /// header sent before any challenge (``HTTP1Transfer``). A WebSocket handshake always goes over the own client,
    /// the one that hands its connection over after a `101` (``RequestPlanner/webSocketRefusal(network:)`` turns
    /// away those that would need libcurl), through a parent inside a CONNECT tunnel. A client certificate is
    /// presented by the connector's TLS (``CurlConnector``), for the own client as for a tunnel.
    static func choose(
        configured: HTTPClientChoice, network: NetworkAuth, route: ParentRoute?, upstreamScheme: String,
        isUpgrade: Bool
    ) -> UpstreamClient {
        if network.answersChallenges { return .libcurl }
        if isUpgrade { return .own }
        if configured == .libcurl { return .libcurl }
        guard let route, upstreamScheme != "https" else { return .own }
        // A SOCKS parent carries the request inside its tunnel, as for https (``HTTP1Transfer`` writes the head for
        // the link the connector made).
        return route.candidates.allSatisfy { $0.scheme == .socks5h || route.routing.ownClientForwards(through: $0) }
            ? .own : .libcurl
    }
}
