/// Whether a request may go on as far as proxy authentication (`[[client]]`) goes, decided by
/// ``RequestPlanner/proxyAuthentication(_:insideTunnel:authenticator:known:)``.
enum ProxyAuthDecision {
    /// No `[[client]]` is configured, the request is inside a tunnel (it acts for the client that opened it), or it
    /// is `/healthz` (liveness probes carry no password).
    case notNeeded
    /// The same `Proxy-Authorization` the connection's last request verified: no hashing again.
    case alreadyVerified
    /// Verified now as `client`, with the header value that did it.
    case verified(ProxyClient, authorization: String)
    /// Refused with 407. `presented`: a header was sent and did not verify (logged); `close`: a CONNECT, whose
    /// tunnel bytes must never be read as requests.
    case refused(presented: Bool, close: Bool)
}
