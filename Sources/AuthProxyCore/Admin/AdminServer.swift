import CAuthProxyShims
import Dispatch
import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// The `[admin]` listener: a small HTTP/1.1 server on its own queue, apart from the proxy's listeners so clients
/// of the proxy cannot reach it. Each connection carries one request (answered with `Connection: close`);
/// addresses outside `allow` are closed at accept, at most ``maxConnections`` are open at once and
/// ``maxConnectionsPerAddress`` per source address (at a limit the oldest connection still sending its request
/// makes room: ``AdminConnectionSlots``), and a connection that has not sent its request within
/// ``requestTimeout`` is closed. Answers come from ``AdminRouter``.
///
/// Ownership: confined to `queue` (`@unchecked Sendable` so Dispatch handlers may capture it).
final class AdminServer: @unchecked Sendable {
    static let maxConnections = 32
    /// So one source cannot hold every slot.
    static let maxConnectionsPerAddress = 8
    static let maxRequestBytes = 16 * 1024
    /// A probe, Prometheus or curl sends its request at once; 3 s (was 10 s) bounds how long a slow connection
    /// holds a slot.
    static let requestTimeout: DispatchTimeInterval = .seconds(3)
    private let slots = AdminConnectionSlots(total: maxConnections, perAddress: maxConnectionsPerAddress)

    let address: ListenAddress
    let boundPort: Int
    private let fd: Int32
    /// Who may connect; a reload may change it (``update(allow:hosts:)``).
    private var allow: [AddressBlock]
    /// `[admin] hosts`, lowercased: names besides IP literals and localhost that requests may be addressed to.
    private var hosts: Set<String>
    private var accepted: UInt64 = 0
    private let backend: any AdminBackend
    private let logger: Logger
    let queue = ProxyQueue.make("authproxy.admin")
    private var source: (any DispatchSourceRead)?
    private var connections: [Int32: Connection] = [:]
    private let throttle = LogThrottle()

    /// One admin connection: its socket, what it sent so far, and the answer being written.
    private final class Connection {
        let fd: Int32
        let peer: IPAddress
        /// Accept order, for choosing the oldest to evict.
        let sequence: UInt64
        var input: [UInt8] = []
        var output: [UInt8] = []
        var written = 0
        var reader: (any DispatchSourceRead)?
        var writer: (any DispatchSourceWrite)?
        var timer: (any DispatchSourceTimer)?
        /// The capture session this connection waits on (`POST /capture`): answered when its window ends.
        var capture: UInt64?

        init(fd: Int32, peer: IPAddress, sequence: UInt64) {
            self.fd = fd
            self.peer = peer
            self.sequence = sequence
        }
    }

    init(config: AdminConfig, backend: any AdminBackend, logger: Logger) throws(ServerError) {
        address = config.listen
        allow = config.allow
        hosts = Set(config.hosts.map { $0.lowercased() })
        self.backend = backend
        self.logger = logger
        (fd, boundPort) = try openListeningSocket(config.listen)
    }

    deinit {
        // Never started: no source owns the socket.
        if source == nil { Glibc.close(fd) }
    }

    func start() {
        source = startAcceptSource(fd: fd, queue: queue) { [unowned self] in self.acceptAll() }
    }

    /// `[admin] allow` or `hosts` changed by a reload: applies to the next connections and requests.
    func update(allow: [AddressBlock], hosts: [String]) {
        let names = Set(hosts.map { $0.lowercased() })
        queue.async { [self] in
            self.allow = allow
            self.hosts = names
        }
    }

    /// Stops accepting and closes open admin connections.
    func stop() {
        queue.sync {
            source?.cancel()
            for c in Array(connections.values) { close(c) }
        }
    }

    private func acceptAll() {
        for _ in 0..<16 {
            var peer = sockaddr_storage()
            var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let c = withUnsafeMutablePointer(to: &peer) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { ap_accept_nonblock(fd, $0, &len) }
            }
            if c < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                return
            }
            guard let ip = IPAddress(peer), allow.contains(ip) else {
                Glibc.close(c)
                if let held = throttle.admit("admin-allow", now: DispatchTime.now().uptimeNanoseconds) {
                    logger.warning(
                        "admin connection refused: address not in [admin] allow",
                        metadata: ["client": "\(describePeer(peer))", "refused_since_last_report": "\(held)"])
                }
                ProxyMetrics.active?.denied(.clientAddress)
                continue
            }
            switch admission(for: ip) {
            case .admit:
                break
            case .admitEvicting(let id):
                guard let victim = connections[id] else { break }
                close(victim)
                if let held = throttle.admit("admin-evict", now: DispatchTime.now().uptimeNanoseconds) {
                    logger.warning(
                        "admin connection closed to make room: it had not sent its request yet",
                        metadata: [
                            "client": "\(victim.peer)", "new_client": "\(describePeer(peer))",
                            "evicted_since_last_report": "\(held)",
                        ])
                }
            case .refuse:
                Glibc.close(c)
                continue
            }
            adopt(c, peer: ip)
        }
    }

    /// Whether a connection from `ip` may be adopted, and whom it replaces.
    private func admission(for ip: IPAddress) -> AdminConnectionSlots.Decision {
        let first = slots.decide(peer: ip, open: openConnections())
        guard first != .admit else { return first }
        // Answer first what has already arrived: a connection whose request sits in its socket buffer (a probe
        // accepted in the same batch) is not slow and must not be the one evicted.
        for c in connections.values.sorted(by: { $0.sequence < $1.sequence }) where c.reader != nil { readable(c) }
        return slots.decide(peer: ip, open: openConnections())
    }

    private func openConnections() -> [AdminConnectionSlots.Open] {
        connections.values.map {
            // A connection waiting for its capture has sent its request: it is not slow, and is never evicted.
            .init(id: $0.fd, peer: $0.peer, sequence: $0.sequence, reading: $0.reader != nil && $0.capture == nil)
        }
    }

    private func adopt(_ fd: Int32, peer: IPAddress) {
        accepted += 1
        let c = Connection(fd: fd, peer: peer, sequence: accepted)
        connections[fd] = c
        let r = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        r.setEventHandler { [unowned self] in self.readable(c) }
        r.resume()
        c.reader = r
        let t = DispatchSource.makeTimerSource(queue: queue)
        t.schedule(deadline: .now() + Self.requestTimeout)
        t.setEventHandler { [unowned self] in self.close(c) }
        t.resume()
        c.timer = t
    }

    private func readable(_ c: Connection) {
        if c.capture != nil {
            heldReadable(c)
            return
        }
        var buf = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = buf.withUnsafeMutableBytes { Glibc.read(c.fd, $0.baseAddress, $0.count) }
            if n > 0 {
                c.input.append(contentsOf: buf[0..<n])
                if c.input.count > Self.maxRequestBytes {
                    answer(c, .text(431, "request too large\n"))
                    return
                }
                continue
            }
            if n == 0 {
                close(c)
                return
            }
            if errno == EINTR { continue }
            if errno == EAGAIN || errno == EWOULDBLOCK { break }
            close(c)
            return
        }
        var parser = RequestHeadParser()
        let result = c.input.withUnsafeBytes { parser.parse($0) }
        switch result {
        case .needMore:
            return
        case .failed(let e):
            answer(c, .text(e.status, "bad request: \(e.message)\n"))
        case .complete(let head, let consumed):
            // A body (POST /reload needs none) is read to its end first, so closing does not reset the answer.
            var bodyLength: Int64 = 0
            if case .contentLength(let n) = head.framing { bodyLength = n }
            if case .chunked = head.framing {
                answer(c, .text(411, "send a Content-Length (or no body)\n"))
                return
            }
            guard Int64(c.input.count - consumed) >= bodyLength else { return }
            let request = AdminRequest(head: head, client: c.peer)
            if let capture = backend as? any AdminCaptureBackend,
                let routing = AdminRouter.captureRoute(request, hosts: hosts, enabled: capture.captureEnabled())
            {
                startCapture(c, routing, capture)
                return
            }
            var response = AdminRouter.route(request, hosts: hosts, backend: backend)
            // HEAD: the GET's Content-Length, without its body.
            let length = response.body.count
            if head.isHead { response.body = [] }
            answer(c, response, bodyLengthOverride: length)
        }
    }

    /// `POST /capture`: answered now when refused, else held open (reading only to see the client leave) until
    /// the window ends; a client that leaves ends the window.
    private func startCapture(
        _ c: Connection, _ routing: AdminRouter.CaptureRouting, _ backend: any AdminCaptureBackend
    ) {
        guard case .start(let ask) = routing else {
            if case .answer(let r) = routing { answer(c, r) }
            return
        }
        let hop = LoopBound(c, queue: queue)
        let done: @Sendable (AdminRouter.Response) -> Void = { [weak self] response in
            guard let self else { return }
            queue.async {
                let c = hop.value
                // The connection may have gone (closed, its descriptor reused): answer only the one that asked.
                guard self.connections[c.fd] === c else { return }
                c.capture = nil
                self.answer(c, response)
            }
        }
        switch backend.startCapture(ask, done: done) {
        case .answer(let r):
            answer(c, r)
        case .started(let session):
            c.capture = session
            c.input = []
            c.timer?.cancel()
            c.timer = nil
        }
    }

    /// Input on a connection waiting for its capture: discarded; the end of it means the client left.
    private func heldReadable(_ c: Connection) {
        var buf = [UInt8](repeating: 0, count: 512)
        while true {
            let n = buf.withUnsafeMutableBytes { Glibc.read(c.fd, $0.baseAddress, $0.count) }
            if n > 0 { continue }
            if n < 0, errno == EINTR { continue }
            if n < 0, errno == EAGAIN || errno == EWOULDBLOCK { return }
            close(c)
            return
        }
    }

    private func answer(_ c: Connection, _ r: AdminRouter.Response, bodyLengthOverride: Int? = nil) {
        c.reader?.cancel()
        c.reader = nil
        var head = "HTTP/1.1 \(r.status) \(reasonPhrase(r.status))\r\n"
        // A 304 has no body, and a Content-Length on it would have to be the 200's (RFC 9110 §8.6).
        if r.status != 304 {
            head += "Content-Type: \(r.contentType)\r\nContent-Length: \(bodyLengthOverride ?? r.body.count)\r\n"
        }
        // The PAC file says how long it may be cached; nothing else here may be.
        if !r.extraHeaders.contains(where: { $0.0 == "Cache-Control" }) { head += "Cache-Control: no-store\r\n" }
        head += "X-Content-Type-Options: nosniff\r\n"
        if r.contentType.hasPrefix("text/html") {
            head += "Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'\r\n"
        }
        for (k, v) in r.extraHeaders { head += "\(k): \(v)\r\n" }
        head += "Connection: close\r\n\r\n"
        c.output = Array(head.utf8) + r.body
        c.written = 0
        flush(c)
    }

    private func flush(_ c: Connection) {
        while c.written < c.output.count {
            let n = c.output.withUnsafeBytes { Glibc.write(c.fd, $0.baseAddress! + c.written, $0.count - c.written) }
            if n > 0 {
                c.written += n
                continue
            }
            if n < 0, errno == EINTR { continue }
            if n < 0, errno == EAGAIN || errno == EWOULDBLOCK {
                if c.writer == nil {
                    let w = DispatchSource.makeWriteSource(fileDescriptor: c.fd, queue: queue)
                    w.setEventHandler { [unowned self] in self.flush(c) }
                    w.resume()
                    c.writer = w
                }
                return
            }
            break
        }
        close(c)
    }

    private func close(_ c: Connection) {
        guard connections.removeValue(forKey: c.fd) != nil else { return }
        // Whoever asked for the capture is gone: its window ends now (another may start).
        if let session = c.capture {
            c.capture = nil
            CaptureRecorder.shared.stop(session: session)
        }
        c.timer?.cancel()
        c.reader?.cancel()
        c.writer?.cancel()
        // The sources are cancelled before the descriptor is closed (their handlers may still be queued).
        let fd = c.fd
        queue.async { Glibc.close(fd) }
    }
}
