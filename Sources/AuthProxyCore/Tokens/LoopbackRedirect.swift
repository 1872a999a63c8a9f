import CAuthProxyShims

#if canImport(Glibc)
    import Glibc
#endif

/// The loopback listener `authproxy login` uses to receive the OAuth redirect: it accepts one request on
/// 127.0.0.1:PORT, answers with a short page, and returns the request target (`/callback?code=…&state=…`).
public final class LoopbackRedirect {
    private let fd: Int32

    /// Binds 127.0.0.1:`port` now, so the listener is up before the user is sent to the portal.
    public init(port: Int) throws(StateError) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw StateError("cannot create a socket: \(lastErrorString())") }
        self.fd = fd
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var sin = sockaddr_in()
        sin.sin_family = sa_family_t(AF_INET)
        sin.sin_port = in_port_t(UInt16(port).bigEndian)
        inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr)
        let rc = withUnsafePointer(to: &sin) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard rc == 0, listen(fd, 4) == 0 else {
            let message = "cannot listen on 127.0.0.1:\(port): \(lastErrorString())"
            close(fd)
            throw StateError(message)
        }
    }

    deinit { close(fd) }

    /// Waits for the redirect request and returns its target.
    public func awaitRequest(timeoutSeconds: Int) throws(StateError) -> String {
        let deadline = time(nil) + time_t(timeoutSeconds)
        while true {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let left = Int32(max(0, deadline - time(nil)) * 1000)
            guard poll(&p, 1, left) > 0 else { throw StateError("no redirect arrived within \(timeoutSeconds) s") }
            let c = accept(fd, nil, nil)
            guard c >= 0 else { continue }
            defer { close(c) }
            var tv = timeval(tv_sec: 5, tv_usec: 0)
            setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
            var buf = [UInt8](repeating: 0, count: 8192)
            var got = 0
            while got < buf.count {
                let n = buf.withUnsafeMutableBytes { read(c, $0.baseAddress! + got, $0.count - got) }
                if n <= 0 { break }
                got += n
                if buf[0..<got].split(separator: 10, maxSplits: 1).count > 1 { break }
            }
            let line = String(decoding: buf[0..<got].prefix { $0 != 13 && $0 != 10 }, as: UTF8.self)
            let parts = line.split(separator: " ")
            guard parts.count == 3, parts[0] == "GET", parts[1].contains("code=") || parts[1].contains("error=") else {
                let reply = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                _ = reply.withCString { write(c, $0, strlen($0)) }
                continue
            }
            let body = "<html><body><p>authproxy: sign-in received. You can close this window.</p></body></html>"
            let reply =
                "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
            _ = reply.withCString { write(c, $0, strlen($0)) }
            return String(parts[1])
        }
    }
}
