/// Parses and validates an HTTP/1.1 request head, strictly: a proxy that reads framing differently from
/// the server behind it enables request smuggling, so anything ambiguous is refused rather than guessed.
///
/// The parser is incremental only in that it remembers how far it has scanned; call ``parse(_:)`` again
/// with the whole unread buffer when more bytes arrive.
public struct RequestHeadParser: Sendable {
    public static let maxRequestLine = 8 * 1024
    public static let maxHeaderBytes = 64 * 1024
    public static let maxHeaderFields = 100

    public enum Result: Sendable, Equatable {
        case needMore
        case complete(RequestHead, consumed: Int)
        case failed(HTTPParseError)
    }

    /// Bytes already known not to contain the end of the head.
    private var scanned = 0

    public init() {}

    public mutating func reset() { scanned = 0 }

    public mutating func parse(_ buf: UnsafeRawBufferPointer) -> Result {
        // Skip empty lines before the request line (RFC 9112 §2.2 allows ignoring them).
        var start = 0
        while start + 1 < buf.count, buf[start] == 13, buf[start + 1] == 10 { start += 2 }
        if start < buf.count, buf[start] == 10 { return .failed(.bad("bare LF")) }

        // Fast scan of the bytes not seen before for the empty line that ends the head; a lone LF
        // anywhere is refused at once rather than waiting for a terminator that will never come.
        var j = max(scanned, start)
        var headEnd: Int? = nil
        while j < buf.count {
            if buf[j] == 10 {
                guard j > start, buf[j - 1] == 13 else { return .failed(.bad("bare LF in request head")) }
                if j >= start + 3, buf[j - 2] == 10, buf[j - 3] == 13 {
                    headEnd = j + 1
                    break
                }
            }
            j += 1
        }
        guard let headEnd else {
            let firstLF = buf[start...].firstIndex(of: 10)
            // Without its LF yet, the line so far ends before a trailing CR (the LF may be in the next read).
            let pending = buf.count - start
            if firstLF == nil, pending > Self.maxRequestLine,
                !(pending == Self.maxRequestLine + 1 && buf[buf.count - 1] == 13)
            {
                return .failed(.uriTooLong)
            }
            if let lf = firstLF, lf - start - 1 > Self.maxRequestLine { return .failed(.uriTooLong) }
            if buf.count - start > Self.maxRequestLine + Self.maxHeaderBytes { return .failed(.headersTooLarge) }
            scanned = buf.count
            return .needMore
        }

        // Split into lines and validate CR placement.
        var lines: [Range<Int>] = []
        lines.reserveCapacity(16)
        var lineStart = start
        var i = start
        while i < headEnd - 2 {
            let c = buf[i]
            if c == 10 {
                let line = lineStart..<(i - 1)
                if lines.isEmpty && line.count > Self.maxRequestLine { return .failed(.uriTooLong) }
                lines.append(line)
                if lines.count > Self.maxHeaderFields + 1 { return .failed(.tooManyHeaders) }
                lineStart = i + 1
            } else if c == 13 && buf[i + 1] != 10 {
                return .failed(.bad("bare CR in request head"))
            }
            i += 1
        }
        scanned = 0
        guard let requestLine = lines.first else { return .failed(.bad("empty request")) }
        if headEnd - start - (requestLine.count + 2) > Self.maxHeaderBytes { return .failed(.headersTooLarge) }
        do {
            let head = try Self.build(buf, requestLine: requestLine, fieldLines: lines.dropFirst())
            return .complete(head, consumed: headEnd)
        } catch let e as HTTPParseError {
            return .failed(e)
        } catch {
            return .failed(.bad("malformed request"))
        }
    }

    private static func build(
        _ buf: UnsafeRawBufferPointer, requestLine: Range<Int>, fieldLines: ArraySlice<Range<Int>>
    ) throws -> RequestHead {
        // request-line = method SP request-target SP HTTP-version
        let rl = UnsafeRawBufferPointer(rebasing: buf[requestLine])
        guard let sp1 = rl.firstIndex(of: 32) else { throw HTTPParseError.bad("malformed request line") }
        guard let sp2 = rl[(sp1 + 1)...].firstIndex(of: 32) else { throw HTTPParseError.bad("malformed request line") }
        let methodBytes = rl[..<sp1]
        let targetBytes = rl[(sp1 + 1)..<sp2]
        let versionBytes = rl[(sp2 + 1)...]
        guard !methodBytes.isEmpty, methodBytes.allSatisfy(isTokenChar) else {
            throw HTTPParseError.bad("invalid method")
        }
        guard !targetBytes.isEmpty, targetBytes.allSatisfy({ $0 > 0x20 && $0 < 0x7f }) else {
            throw HTTPParseError.bad("invalid request target")
        }
        let version = String(decoding: versionBytes, as: UTF8.self)
        let minor: Int
        switch version {
        case "HTTP/1.1": minor = 1
        case "HTTP/1.0": minor = 0
        default:
            if version.hasPrefix("HTTP/"), version.count == 8 {
                throw HTTPParseError(status: 505, "HTTP version \(version) is not supported")
            }
            throw HTTPParseError.bad("malformed HTTP version")
        }
        let method = String(decoding: methodBytes, as: UTF8.self)
        let targetString = String(decoding: targetBytes, as: UTF8.self)

        var headers = HTTPHeaders()
        for line in fieldLines {
            let l = UnsafeRawBufferPointer(rebasing: buf[line])
            if l[0] == 32 || l[0] == 9 { throw HTTPParseError.bad("obsolete line folding in header") }
            guard let colon = l.firstIndex(of: 58) else { throw HTTPParseError.bad("header field without colon") }
            let name = l[..<colon]
            guard !name.isEmpty, name.allSatisfy(isTokenChar) else {
                throw HTTPParseError.bad("invalid header field name")
            }
            var vs = colon + 1
            var ve = l.count
            while vs < ve, l[vs] == 32 || l[vs] == 9 { vs += 1 }
            while ve > vs, l[ve - 1] == 32 || l[ve - 1] == 9 { ve -= 1 }
            let value = l[vs..<ve]
            guard value.allSatisfy({ $0 == 9 || $0 >= 0x20 && $0 != 0x7f }) else {
                throw HTTPParseError.bad("invalid character in header field value")
            }
            headers.add(name: String(decoding: name, as: UTF8.self), value: String(decoding: value, as: UTF8.self))
        }

        let target = try parseTarget(method: method, targetString)

        // Host: at most one; HTTP/1.1 requests addressed to the proxy itself need one.
        let hosts = headers.values("host")
        if hosts.count > 1 { throw HTTPParseError.bad("more than one Host header") }
        if case .origin = target, minor == 1, hosts.isEmpty { throw HTTPParseError.bad("missing Host header") }

        // Body framing.
        let framing: BodyFraming
        let te = headers.values("transfer-encoding")
        let cl = headers.values("content-length")
        if !te.isEmpty {
            if !cl.isEmpty { throw HTTPParseError.bad("both Content-Length and Transfer-Encoding") }
            if minor == 0 { throw HTTPParseError.bad("Transfer-Encoding in an HTTP/1.0 request") }
            let codings = headers.tokens("transfer-encoding")
            guard codings == ["chunked"] else {
                throw HTTPParseError(status: 501, "only the chunked transfer-coding is supported")
            }
            framing = .chunked
        } else if !cl.isEmpty {
            var length: Int64? = nil
            for field in cl {
                for part in field.split(separator: ",", omittingEmptySubsequences: false) {
                    let p = part.trimmingHTTPWhitespace()
                    guard !p.isEmpty, p.count <= 18, p.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }),
                        let n = Int64(p)
                    else { throw HTTPParseError.bad("invalid Content-Length") }
                    if let l = length, l != n { throw HTTPParseError.bad("conflicting Content-Length values") }
                    length = n
                }
            }
            framing = .contentLength(length ?? 0)
        } else {
            framing = .none
        }
        if method == "CONNECT" && framing != .none { throw HTTPParseError.bad("CONNECT request with a body") }

        let connection = headers.tokens("connection") + headers.tokens("proxy-connection")
        let keepAlive = minor == 1 ? !connection.contains("close") : connection.contains("keep-alive")

        var expectsContinue = false
        if let expect = headers.first("expect") {
            guard expect.lowercased() == "100-continue" else {
                throw HTTPParseError(status: 417, "unsupported Expect value")
            }
            expectsContinue = minor == 1
        }

        var head = RequestHead(
            method: method, target: target, minorVersion: minor, headers: headers, framing: framing,
            keepAlive: keepAlive, expectsContinue: expectsContinue)
        // Looked at only when `Connection` lists `upgrade`: every other request pays one look at a short list.
        if connection.contains("upgrade") { head.upgrade = webSocketUpgrade(head) }
        return head
    }

    /// The `Upgrade` value to forward when `head` is a WebSocket handshake (RFC 6455 §4.1: GET, HTTP/1.1, no body,
    /// `Upgrade` naming `websocket`): `websocket` alone, whatever else the client listed, nil otherwise. Other
    /// protocols (`h2c`) are never offered upstream: a switch to them would leave the proxy a raw relay that parses
    /// nothing (``WebSocketSwitch``), so the server may only choose WebSocket or no switch.
    static func webSocketUpgrade(_ head: RequestHead) -> String? {
        guard head.method == "GET", head.minorVersion == 1, head.framing == .none || head.framing == .contentLength(0),
            head.headers.tokens("upgrade").contains("websocket")
        else { return nil }
        switch head.target {
        case .absolute, .origin: return "websocket"
        case .authority: return nil
        }
    }

    static func parseTarget(method: String, _ t: String) throws -> RequestTarget {
        if method == "CONNECT" {
            guard let (host, port) = try parseAuthority(Substring(t)), let port else {
                throw HTTPParseError.bad("CONNECT needs a host:port target")
            }
            return .authority(host: host, port: port)
        }
        // A fragment never belongs in a request-target (RFC 9112 §3.2); libcurl would drop it after matching
        // had seen the path behind it (`/other/x#/../../secure` inside an intercepted tunnel).
        // Byte-wise scans throughout: Character iteration and Foundation's string search cost microseconds per
        // request, and every byte that matters here is ASCII.
        let u = t.utf8
        if u.contains(UInt8(ascii: "#")) { throw HTTPParseError.bad("fragment ('#') in request target") }
        if u.first == UInt8(ascii: "/") { return .origin(path: t) }
        if t == "*" && method == "OPTIONS" { return .origin(path: t) }
        func hasPrefix(_ p: StaticString) -> Bool {
            u.count > p.utf8CodeUnitCount && asciiHasPrefixIgnoringCase(u, p)
        }
        let scheme: String
        var rest: Substring
        if hasPrefix("http://") {
            scheme = "http"
            rest = Substring(u.dropFirst(7))
        } else if hasPrefix("https://") {
            scheme = "https"
            rest = Substring(u.dropFirst(8))
        } else if hasPrefix("ws://") {
            // WebSocket URLs in absolute form (curl up to 8.20 sends `GET ws://…`): the handshake is an http(s)
            // request (RFC 6455 §3), matched and forwarded as one.
            scheme = "http"
            rest = Substring(u.dropFirst(5))
        } else if hasPrefix("wss://") {
            scheme = "https"
            rest = Substring(u.dropFirst(6))
        } else if let colon = u.firstIndex(of: UInt8(ascii: ":")) {
            throw HTTPParseError.bad("unsupported URL scheme '\(t[..<colon].prefix(16))'")
        } else {
            throw HTTPParseError.bad("invalid request target")
        }
        let authorityEnd = rest.utf8.firstIndex { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") } ?? rest.endIndex
        guard let (host, port) = try parseAuthority(rest[..<authorityEnd]) else {
            throw HTTPParseError.bad("invalid host in request target")
        }
        var pathAndQuery = String(rest[authorityEnd...])
        if pathAndQuery.isEmpty {
            pathAndQuery = "/"
        } else if pathAndQuery.utf8.first == UInt8(ascii: "?") {
            pathAndQuery = "/" + pathAndQuery
        }
        return .absolute(
            URLTarget(
                scheme: scheme, host: host, port: port ?? (scheme == "https" ? 443 : 80), pathAndQuery: pathAndQuery))
    }

    /// Splits `host[:port]` (IPv6 in brackets); nil when the host is empty. Throws on user info or bad ports.
    static func parseAuthority(_ a: Substring) throws -> (String, Int?)? {
        if a.utf8.contains(UInt8(ascii: "@")) { throw HTTPParseError.bad("user info in request target is not allowed") }
        var host: Substring
        var portPart: Substring? = nil
        if a.utf8.first == UInt8(ascii: "[") {
            guard let close = a.utf8.firstIndex(of: UInt8(ascii: "]")) else {
                throw HTTPParseError.bad("invalid IPv6 literal")
            }
            host = a[a.utf8.index(after: a.startIndex)..<close]
            let after = a[a.utf8.index(after: close)...]
            if !after.isEmpty {
                guard after.utf8.first == UInt8(ascii: ":") else { throw HTTPParseError.bad("invalid authority") }
                portPart = Substring(after.utf8.dropFirst())
            }
            guard !host.isEmpty, host.allSatisfy({ $0.isHexDigit || $0 == ":" || $0 == "." }) else {
                throw HTTPParseError.bad("invalid IPv6 literal")
            }
        } else {
            if let colon = a.utf8.firstIndex(of: UInt8(ascii: ":")) {
                host = a[..<colon]
                portPart = a[a.utf8.index(after: colon)...]
            } else {
                host = a
            }
            guard host.utf8.allSatisfy(isRegNameChar) else { throw HTTPParseError.bad("invalid host name") }
        }
        if host.isEmpty { return nil }
        var port: Int? = nil
        if let p = portPart {
            guard !p.isEmpty, p.utf8.count <= 5, p.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), let n = Int(p), n > 0,
                n < 65536
            else { throw HTTPParseError.bad("invalid port") }
            port = n
        }
        return (host.lowercased(), port)
    }
}

@inlinable
func isTokenChar(_ c: UInt8) -> Bool {
    switch c {
    case 0x30...0x39, 0x41...0x5a, 0x61...0x7a: return true
    case UInt8(ascii: "!"), UInt8(ascii: "#"), UInt8(ascii: "$"), UInt8(ascii: "%"), UInt8(ascii: "&"),
        UInt8(ascii: "'"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: "."),
        UInt8(ascii: "^"), UInt8(ascii: "_"), UInt8(ascii: "`"), UInt8(ascii: "|"), UInt8(ascii: "~"):
        return true
    default: return false
    }
}

@inlinable
func isRegNameChar(_ c: UInt8) -> Bool {
    switch c {
    case 0x30...0x39, 0x41...0x5a, 0x61...0x7a: return true
    // No '%': libcurl would decode `127%2e0%2e0%2e1` and connect somewhere other than what matching saw.
    case UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"): return true
    default: return false
    }
}
