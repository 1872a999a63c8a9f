/// Why an exchange with an upstream failed, in the proxy's own terms: both upstream clients (the own HTTP/1.1 client
/// and libcurl transfers) report these, so a GIS client gets the same answer, log line and metric whichever
/// carried its request. libcurl's codes are mapped in one place (``init(curl:)``).
enum UpstreamFailure: Equatable, Sendable {
    /// The host name did not resolve.
    case dns
    /// No address accepted a connection (or every one was refused by `deny_destinations`).
    case connect
    /// Nothing moved for `upstream_timeout_seconds`, or a total limit passed.
    case timeout
    /// The upstream closed the connection without a byte of response.
    case nothing
    /// The connection failed (reset, send or receive error) inside the exchange.
    case reset
    /// The upstream closed the connection inside the response.
    case partial
    /// The upstream's certificate could not be verified.
    case untrustedCertificate
    /// The upstream's public key is not the pinned one.
    case pinMismatch
    /// The TLS handshake failed otherwise (or the configured CA bundle could not be used).
    case tlsHandshake
    /// The upstream's response is not valid HTTP/1.1.
    case protocolError
    /// The client stopped taking the response: nobody to answer.
    case clientGone
    /// The request body could not be read from the client: nobody to answer.
    case requestBody
    /// A rarer failure, as libcurl describes it.
    case other(String)
}
