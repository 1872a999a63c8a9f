/// A `host:port` the proxy listens on: `127.0.0.1:3128`, `[::1]:3128`, `0.0.0.0:3128`, `[::]:3128`.
public struct ListenAddress: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    public var isIPv6: Bool { host.contains(":") }
    /// `0.0.0.0` or `::`: every address of the machine, so not one a client can be told to use.
    public var isWildcard: Bool { host == "0.0.0.0" || host == "::" }
    public var description: String { isIPv6 ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// Parses `host:port`; the host must be a numeric IPv4 or IPv6 address (or `localhost`).
    public static func parse(_ text: String) -> ListenAddress? {
        var host: Substring
        var portText: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[close...].hasPrefix("]:") else { return nil }
            host = text[text.index(after: text.startIndex)..<close]
            portText = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":") else { return nil }
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
            if host.contains(":") { return nil }
        }
        if host == "localhost" { host = "127.0.0.1" }
        guard let port = Int(portText), (0...65535).contains(port), !host.isEmpty,
            isNumericAddress(String(host))
        else { return nil }
        return ListenAddress(host: String(host), port: port)
    }
}
