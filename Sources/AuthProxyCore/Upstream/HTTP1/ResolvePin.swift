/// The `CURLOPT_RESOLVE` entry that gives libcurl the address the ``Dialer`` connected to, so a `CONNECT_ONLY`
/// handle (``CurlConnector``) that connects over that socket looks nothing up itself: `host:port:address`, an
/// IPv6 address in brackets. An IP-literal host needs none (libcurl does not look one up).
enum ResolvePin {
    /// `host` as libcurl names it (lower case does not matter, an IPv6 literal without brackets).
    static func entry(host: String, port: Int, address: IPAddress) -> String? {
        guard IPAddress.parse(host) == nil else { return nil }
        return address.isIPv4 ? "\(host):\(port):\(address)" : "\(host):\(port):[\(address)]"
    }
}
