/// Where a request wants to go, by the three request-target forms a proxy sees (RFC 9112 §3.2).
public enum RequestTarget: Sendable, Equatable {
    /// `GET http://host:port/path?q HTTP/1.1`: a request to forward.
    case absolute(URLTarget)
    /// `CONNECT host:port HTTP/1.1`: a tunnel.
    case authority(host: String, port: Int)
    /// `GET /healthz HTTP/1.1`: addressed to the proxy itself.
    case origin(path: String)
}

/// The parts of an absolute-form target. `host` has no brackets; `pathAndQuery` starts with `/`.
public struct URLTarget: Sendable, Equatable {
    public var scheme: String
    public var host: String
    public var port: Int
    public var pathAndQuery: String

    public init(scheme: String, host: String, port: Int, pathAndQuery: String) {
        self.scheme = scheme
        self.host = host
        self.port = port
        self.pathAndQuery = pathAndQuery
    }

    /// `host` as written in a URL (IPv6 literals in brackets).
    public var urlHost: String { host.utf8.contains(UInt8(ascii: ":")) ? "[\(host)]" : host }

    public var isDefaultPort: Bool { (scheme == "http" && port == 80) || (scheme == "https" && port == 443) }

    /// The URL handed to libcurl.
    public var url: String {
        isDefaultPort ? "\(scheme)://\(urlHost)\(pathAndQuery)" : "\(scheme)://\(urlHost):\(port)\(pathAndQuery)"
    }

    /// The path without the query string: what the access log may show.
    public var path: Substring {
        pathAndQuery[..<(queryStart ?? pathAndQuery.endIndex)]
    }

    /// Where `?` is, if there is a query (a byte scan: Character iteration costs ~1 µs per URL).
    public var queryStart: String.Index? { pathAndQuery.utf8.firstIndex(of: UInt8(ascii: "?")) }

    /// The same URL with another path (the query is kept).
    public func replacingPath(_ path: String) -> URLTarget {
        var t = self
        t.pathAndQuery = queryStart.map { path + pathAndQuery[$0...] } ?? path
        return t
    }

    /// `scheme://host:port` for logs and error messages.
    public var origin: String { "\(scheme)://\(urlHost):\(port)" }
}

/// How the body of a request is delimited.
public enum BodyFraming: Sendable, Equatable {
    case none
    case contentLength(Int64)
    case chunked
}

/// A parsed and validated request head.
public struct RequestHead: Sendable, Equatable {
    public var method: String
    public var target: RequestTarget
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    public var minorVersion: Int
    public var headers: HTTPHeaders
    public var framing: BodyFraming
    /// Whether the client wants the connection kept open after this exchange.
    public var keepAlive: Bool
    public var expectsContinue: Bool
    /// The `Upgrade` value of a WebSocket handshake (`GET`, HTTP/1.1, `Connection: upgrade`, `Upgrade: websocket`,
    /// no body), which goes upstream with `Connection: Upgrade` so that a `101` can answer it; nil for every other
    /// request (their `Upgrade`, such as `h2c`, stays hop-by-hop and is dropped).
    public var upgrade: String? = nil

    public var isHead: Bool { method == "HEAD" }
}
