/// A running upstream exchange, whichever client carries it: libcurl (``CurlTransfer``: TLS upstreams and
/// every network-authentication scheme) or the proxy's own HTTP/1.1 client (``HTTP1Transfer``: plain `http://`
/// upstreams without a network credential). Both report through ``UpstreamExchangeDelegate`` on the event
/// loop's queue, with the same rules: after ``cancel()`` nothing more is reported.
protocol UpstreamExchange: AnyObject {
    /// Host and port, for error messages and logs.
    var destination: String { get }
    /// Resumes reading the response or supplying the request body after a pause was answered.
    func resume()
    /// Stops the exchange; no delegate call follows.
    func cancel()
    /// The scheme the exchange logged in with after a 401 it did not hand on (the own client's Digest round,
    /// ``DigestLogin``), for the network-auth metrics; nil when the delegate saw every challenge.
    var answeredChallenge: String? { get }
}

extension UpstreamExchange {
    var answeredChallenge: String? { nil }
}

extension CurlTransfer: UpstreamExchange {}
