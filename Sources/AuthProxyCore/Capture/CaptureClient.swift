import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// `authproxy capture`: asks the running proxy's admin listener for a capture window (`POST /capture`) and waits
/// for the HAR file it answers with when the window ends. A plain blocking HTTP/1.1 exchange: one request, the
/// answer read to the close.
public enum CaptureClient {
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    /// Where the CLI reaches the admin listener `listen`: a wildcard address is reached on loopback.
    public static func address(of listen: ListenAddress) -> ListenAddress {
        switch listen.host {
        case "0.0.0.0": return ListenAddress(host: "127.0.0.1", port: listen.port)
        case "::": return ListenAddress(host: "::1", port: listen.port)
        default: return listen
        }
    }

    /// The HAR file (the response body) for a window of `seconds` on `credential`; a refusal is a ``Failure``
    /// with the admin listener's message.
    public static func capture(admin: ListenAddress, credential: String, seconds: Int) throws(Failure) -> [UInt8] {
        let target = address(of: admin)
        let query =
            "credential=\(TokenInjection.percentEncoded(credential))&seconds=\(seconds)"
        let request =
            "POST /capture?\(query) HTTP/1.1\r\nHost: \(target)\r\nX-Authproxy-Capture: 1\r\n"
            + "Content-Length: 0\r\nConnection: close\r\n\r\n"
        // The window, and time for the proxy to write the file.
        let answer = try exchange(target, request: Array(request.utf8), timeoutSeconds: seconds + 60)
        guard let end = answer.firstRange(of: Array("\r\n\r\n".utf8)) else {
            throw Failure(description: "the admin listener at \(target) sent no complete answer")
        }
        let head = String(decoding: answer[..<end.lowerBound], as: UTF8.self)
        let body = Array(answer[end.upperBound...])
        let statusLine = head.prefix { $0 != "\r" }
        let status = statusLine.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
        guard status == 200 else {
            let message = String(decoding: body.prefix(2000), as: UTF8.self).trimmingCharacters(
                in: .whitespacesAndNewlines)
            throw Failure(description: "the admin listener at \(target) answered \(statusLine): \(message)")
        }
        return body
    }

    private static func exchange(_ a: ListenAddress, request: [UInt8], timeoutSeconds: Int) throws(Failure) -> [UInt8] {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(a.host, String(a.port), &hints, &list) == 0, let first = list else {
            throw Failure(description: "cannot resolve the admin listener address \(a)")
        }
        defer { freeaddrinfo(list) }
        let fd = socket(first.pointee.ai_family, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "cannot open a socket: \(String(cString: strerror(errno)))") }
        defer { Glibc.close(fd) }
        var tv = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        guard connect(fd, first.pointee.ai_addr, first.pointee.ai_addrlen) == 0 else {
            throw Failure(
                description: "cannot connect to the admin listener at \(a) ([admin] listen): "
                    + String(cString: strerror(errno)) + "; is the proxy running with this configuration?")
        }
        var sent = 0
        while sent < request.count {
            let n = request.withUnsafeBytes { send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { throw Failure(description: "the admin listener at \(a) closed the connection") }
            sent += n
        }
        var answer: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n > 0 {
                answer.append(contentsOf: buf[0..<n])
                continue
            }
            if n == 0 { return answer }
            if errno == EINTR { continue }
            if errno == EAGAIN || errno == EWOULDBLOCK {
                throw Failure(description: "no answer from the admin listener at \(a) within \(timeoutSeconds) s")
            }
            throw Failure(description: "reading from the admin listener at \(a): \(String(cString: strerror(errno)))")
        }
    }
}
