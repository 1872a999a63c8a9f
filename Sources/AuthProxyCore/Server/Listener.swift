import CAuthProxyShims
import Dispatch
import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// A non-blocking listening socket; accepted connections are checked against `allow_clients` and the
/// connection limits, then handed round-robin to the event loops.
///
/// Confined to its accept queue, which is one event loop's queue (`@unchecked Sendable` so the Dispatch source
/// handler may capture it). The listener's members are its own: the loop's are touched only through `adopt`.
final class Listener: @unchecked Sendable {
    let address: ListenAddress
    private let fd: Int32
    private var source: (any DispatchSourceRead)?
    private let queue: DispatchQueue
    private let loops: [EventLoop]
    private var next = 0
    /// The current configuration generation's access rules (replaced by ``install(_:)`` on a reload).
    private var access: AccessControl
    private let logger: Logger
    private let descriptors: DescriptorExhaustion
    /// The port actually bound (differs from the configured one for port 0).
    let boundPort: Int

    init(
        address: ListenAddress, loops: [EventLoop], queue: DispatchQueue, access: AccessControl,
        descriptors: DescriptorExhaustion, logger: Logger
    ) throws(ServerError) {
        self.address = address
        self.loops = loops
        self.access = access
        self.descriptors = descriptors
        self.logger = logger
        (fd, boundPort) = try openListeningSocket(address)
        self.queue = queue
    }

    deinit {
        // Never started (a later listener failed): no source owns the socket yet.
        if source == nil { Glibc.close(fd) }
    }

    func start() {
        source = startAcceptSource(fd: fd, queue: queue) { [unowned self] in self.acceptAll() }
    }

    /// A reload: connections accepted from now on are checked against `access` (the allow-list; the connection
    /// limiter is the same process-wide object in every generation).
    func install(_ access: AccessControl) {
        queue.async { [self] in self.access = access }
    }

    /// Stops accepting; the socket is closed once the source is cancelled.
    func stop() {
        queue.async { [self] in
            if paused { source?.resume(); paused = false }
            source?.cancel()
        }
    }

    private var paused = false

    /// Accepts again after a pause for lack of descriptors (a no-op when not paused, or stopped).
    private func resumeAccepting() {
        guard paused, let s = source, !s.isCancelled else { return }
        paused = false
        s.resume()
    }

    private func acceptAll() {
        for _ in 0..<64 {
            var peer = sockaddr_storage()
            var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let c = withUnsafeMutablePointer(to: &peer) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    ap_accept_nonblock(fd, $0, &len)
                }
            }
            if c < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                let error = errno
                if DescriptorExhaustion.isExhaustion(error) {
                    // Out of descriptors: the pending connection keeps the socket readable, so stop accepting for
                    // a moment instead of spinning. A timer, not the next close: descriptors freed meanwhile go
                    // to the upstream sockets of clients already accepted (resuming on every close handed each
                    // freed one to a new client, and in a test far more requests then failed with 503).
                    descriptors.report(.accept, error: error, logger: logger, now: DispatchTime.now().uptimeNanoseconds)
                    if !paused, let s = source {
                        paused = true
                        s.suspend()
                        weak let me = self
                        queue.asyncAfter(deadline: .now() + .milliseconds(100)) { me?.resumeAccepting() }
                    }
                }
                return  // EAGAIN: wait for the next readiness event
            }
            guard let ip = IPAddress(peer) else {
                Glibc.close(c)
                continue
            }
            if !access.allowClients.contains(ip) {
                // Closed before a byte is read: the client learns nothing, and spends nothing.
                Glibc.close(c)
                ProxyMetrics.active?.denied(.clientAddress)
                refused("client address not in [proxy] allow_clients", ip)
                continue
            }
            if let refusal = access.connections.acquire(ip) {
                Glibc.close(c)
                ProxyMetrics.active?.denied(.connectionLimit)
                let soFar = access.connections.refusals
                switch refusal {
                case .total:
                    refused("max_connections (\(access.connections.total)) reached", ip, total: soFar.total)
                case .perClient:
                    refused(
                        "max_connections_per_client (\(access.connections.perClient)) reached for this address", ip,
                        total: soFar.perClient)
                }
                continue
            }
            var one: Int32 = 1
            setsockopt(c, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let loop = loops[next]
            next = (next + 1) % loops.count
            let name = describePeer(peer)
            if loop.queue === queue {
                loop.adopt(fd: c, peer: name, address: ip)
            } else {
                loop.queue.async { loop.adopt(fd: c, peer: name, address: ip) }
            }
        }
    }
}

extension Listener {
    /// Logs a refused connection, at most once per 10 s per reason (with the number held back meanwhile and, for
    /// the connection limits, how many that limit refused since the start).
    private func refused(_ reason: String, _ ip: IPAddress, total: Int? = nil) {
        guard let held = access.throttle.admit(reason, now: DispatchTime.now().uptimeNanoseconds) else { return }
        var meta: Logger.Metadata = ["client": "\(ip)", "reason": "\(reason)"]
        if held > 0 { meta["refused_since_last_report"] = "\(held)" }
        if let total { meta["refused_total"] = "\(total)" }
        logger.warning("connection refused", metadata: meta)
    }
}

/// Errors starting or running the server, with the address and cause.
public struct ServerError: Error, CustomStringConvertible, Sendable {
    public let description: String
    /// The configuration cannot work as given (e.g. a `state_key` that does not open the state file): the
    /// command exits 2, like for a bad configuration file.
    public var isConfigurationError = false

    static func listen(_ a: ListenAddress, _ err: Int32) -> ServerError {
        ServerError(description: "cannot listen on \(a): \(String(cString: strerror(err)))")
    }
}
