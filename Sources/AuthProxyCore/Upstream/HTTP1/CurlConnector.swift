import CAuthProxyShims
import CCurl
import Dispatch

#if canImport(Glibc)
    import Glibc
#endif

/// Opens a connection that the ``Dialer`` connects and libcurl (`CONNECT_ONLY`, on the loop's multi handle) then
/// makes usable, and that the proxy reads and writes itself through ``CurlLink``:
/// - a TLS connection to an `https://` upstream for the own HTTP/1.1 client (``HTTP1Transfer``), so the TLS
///   handshake, certificate and host-name verification and the server-trust settings (CA file, pinned key, no
///   verification) are exactly libcurl's, as for every other https transfer;
/// - a connection through a parent proxy (``ParentRoute``): the Dialer reaches the parent, libcurl makes TLS to
///   it for an `https://` parent, sends CONNECT, answers its authentication (Basic, Digest, NTLM, Negotiate), then
///   for `tls` makes the TLS connection to the destination inside the tunnel. Without `tls` the tunnel is plain: a
///   blind tunnel's or a WebSocket's bytes. A parent that cannot be reached, does not answer, or refuses the
///   login is recorded in ``ParentHealth`` and the next parent is tried.
///
/// The Dialer resolves off the loop and checks `deny_destinations` on the destination's addresses (never on a
/// parent's: the destination is the parent's to reach). libcurl gets the connected socket from its open-socket
/// callback (once), is told by its socket-option callback that it is connected, and finds the dialed address
/// pinned for the host (``ResolvePin``): it resolves and connects nothing itself. From the open-socket call on the
/// socket is libcurl's, closed through the multi handle's close callback; until then it is this object's.
///
/// `timeoutSeconds` bounds each attempt's connect (the dial, then libcurl's part in what is left of it), as
/// libcurl's connect timeout did for the whole of it.
///
/// Confined to the loop's queue. `done` is called once, unless ``cancel()`` came first.
final class CurlConnector {
    private let multi: CurlMulti
    /// The destination as in a URL (an IPv6 address in brackets), and as dialed.
    private let host: String
    private let dialHost: String
    private let port: Int
    private let tls: Bool
    private let trust: ServerTrustSettings?
    private let timeoutSeconds: Int
    private let destination: String
    /// `deny_destinations`, for a direct connection (also after every parent failed).
    private let denyDirect: [AddressBlock]
    private let route: ParentRoute?
    private var parents: [ParentProxy] = []
    private var parentIndex = 0
    /// Every parent failed and the route allows the destination directly (a PAC file's trailing `DIRECT`).
    private var wentDirect = false
    private var dialer: Dialer?
    private var dialTimer: (any DispatchSourceTimer)?
    /// When the current attempt's connect must be done (uptime ns).
    private var deadline: UInt64 = 0
    /// The dialed socket until libcurl's open-socket callback takes it; -1 otherwise.
    private var dialedFD: Int32 = -1
    private var easy: CurlEasyHandle?
    private var done: ((Result<CurlLink, UpstreamError>) -> Void)?

    init(
        multi: CurlMulti, urlHost: String, port: Int, tls: Bool = true, trust: ServerTrustSettings?,
        timeoutSeconds: Int,
        denyDestinations: [AddressBlock], route: ParentRoute? = nil
    ) {
        self.multi = multi
        self.host = urlHost
        dialHost = urlHost.hasPrefix("[") && urlHost.hasSuffix("]") ? String(urlHost.dropFirst().dropLast()) : urlHost
        self.port = port
        self.tls = tls
        self.trust = trust
        self.timeoutSeconds = timeoutSeconds
        self.route = route
        destination = "\(urlHost):\(port)"
        denyDirect = denyDestinations
        if let route { parents = route.routing.health.order(route.candidates) }
    }

    /// The parent in use (nil: direct).
    var parent: ParentProxy? { parents.isEmpty || wentDirect ? nil : parents[parentIndex] }

    func start(_ done: @escaping (Result<CurlLink, UpstreamError>) -> Void) {
        assertOnQueue(multi.queue)
        self.done = done
        attempt()
    }

    /// Stops connecting; `done` is not called.
    func cancel() {
        assertOnQueue(multi.queue)
        done = nil
        stopDialing()
        closeDialed()
        guard let h = easy else { return }
        easy = nil
        h.connector = nil
        // A removal deferred because libcurl is on the stack must not let that call take the socket through this
        // object once it is gone: the open callback refuses without its data pointer.
        ap_easy_setopt_ptr(h.raw, CURLOPT_OPENSOCKETDATA, nil)
        multi.releaseConnectOnly(h)
    }

    // MARK: dialing

    /// Dials the parent in use, or the destination.
    private func attempt() {
        let p = parent
        if let route, let p { route.routing.health.attempted(p) }
        deadline = DispatchTime.now().uptimeNanoseconds + UInt64(timeoutSeconds) * 1_000_000_000
        let d = Dialer(
            host: p?.host ?? dialHost, port: p?.port ?? port, deny: p == nil ? denyDirect : (route?.parentDeny ?? []),
            queue: multi.queue,
            keepAlive: false)
        dialer = d
        let t = DispatchSource.makeTimerSource(queue: multi.queue)
        t.schedule(deadline: DispatchTime(uptimeNanoseconds: deadline))
        // Cancelled (on this queue) before the connector goes: the handler never runs after that.
        t.setEventHandler { [unowned self] in dialTimedOut() }
        t.resume()
        dialTimer = t
        // Not called after cancel() (which cancels the dialer).
        let me = LoopBound(self, queue: multi.queue)
        d.start { outcome in me.value.dialed(outcome) }
    }

    private func stopDialing() {
        dialer?.cancel()
        dialer = nil
        dialTimer?.cancel()
        dialTimer = nil
    }

    private func dialed(_ outcome: Result<SocketChannel, DialFailure>) {
        stopDialing()
        switch outcome {
        case .success(let channel):
            // The socket reaches libcurl once the channel's sources are gone (libcurl makes its own).
            let me = LoopBound(self, queue: multi.queue)
            channel.relinquish { fd in me.value.connect(over: fd) }
        case .failure(.outOfDescriptors(let e)):
            // The proxy's own shortage, not the parent's fault.
            finish(.failure(dialError(.outOfDescriptors(e))))
        case .failure(let f):
            if let route, let p = parent {
                guard let giveUp = parentFailed(p, route: route, cause: .connect, connectStatus: 0) else { return }
                var error = dialError(f)
                error.parent = giveUp
                finish(.failure(error))
            } else {
                finish(.failure(dialError(f)))
            }
        }
    }

    private func dialTimedOut() {
        stopDialing()
        let p = parent
        var error = UpstreamError(
            cause: .timeout,
            detail:
                "Failed to connect to \(p?.host ?? dialHost) port \(p?.port ?? port) after \(timeoutSeconds * 1000) ms",
            destination: destination, timeoutSeconds: timeoutSeconds)
        if let route, let p {
            guard let giveUp = parentFailed(p, route: route, cause: .timeout, connectStatus: 0) else { return }
            error.parent = giveUp
        }
        finish(.failure(error))
    }

    private func dialError(_ f: DialFailure) -> UpstreamError {
        let p = parent
        return UpstreamError(
            dial: f, host: p?.host ?? dialHost, port: p?.port ?? port, destination: destination,
            timeoutSeconds: timeoutSeconds)
    }

    // MARK: libcurl over the dialed socket

    /// libcurl makes the connection over `fd`, connected by the Dialer.
    private func connect(over fd: Int32) {
        guard done != nil, !multi.isTornDown else {
            Glibc.close(fd)
            return
        }
        guard let h = multi.makeConnectOnlyHandle() else {
            Glibc.close(fd)
            finish(
                .failure(
                    UpstreamError(
                        cause: .other("out of memory"), detail: "libcurl could not make a connection handle",
                        destination: destination, timeoutSeconds: timeoutSeconds)))
            return
        }
        easy = h
        dialedFD = fd
        let e = h.raw
        // The origin only: the request itself goes over the connection later, written by the own client.
        "\(tls ? "https" : "http")://\(host):\(port)/".withCString { _ = ap_easy_setopt_ptr(e, CURLOPT_URL, $0) }
        ap_easy_setopt_ptr(e, CURLOPT_OPENSOCKETDATA, Unmanaged.passUnretained(self).toOpaque())
        ap_easy_setopt_opensocket_cb(e, connectorOpenSocketCallback)
        ap_easy_setopt_sockopt_cb(e, connectorSocketOptionCallback)
        let p = parent
        if let peer = peerAddress(fd),
            let pin = ResolvePin.entry(host: p?.host ?? dialHost, port: p?.port ?? port, address: peer)
        {
            h.pinResolve(pin)
        }
        // What is left of the attempt's time (the handle is new: no recorded timeout to keep in step).
        let now = DispatchTime.now().uptimeNanoseconds
        ap_easy_setopt_long(
            e, CURLOPT_CONNECTTIMEOUT_MS, deadline > now ? max(1, Int((deadline - now) / 1_000_000)) : 1)
        if let trust, tls { h.applyTrust(trust) }
        if let route, let p { h.applyParent(p, routing: route.routing, tunnel: true, https: tls) }
        guard multi.addConnectOnly(h, connector: self) else {
            easy = nil
            closeDialed()
            finish(
                .failure(
                    UpstreamError(
                        cause: .other("libcurl refused the connection handle"),
                        detail: "libcurl refused the connection handle",
                        destination: destination, timeoutSeconds: timeoutSeconds)))
            return
        }
    }

    /// The dialed socket, when libcurl did not take it.
    private func closeDialed() {
        guard dialedFD >= 0 else { return }
        Glibc.close(dialedFD)
        dialedFD = -1
    }

    /// Called by ``CurlMulti`` when libcurl is done connecting. On success the handle now holds the connection.
    func finished(_ code: CURLcode, on h: CurlEasyHandle) {
        easy = nil
        // libcurl failed before it asked for the socket.
        closeDialed()
        guard done != nil else { return }
        var parentFailure: ParentFailure? = nil
        if let route, let p = parent {
            if let cause = h.parentFailure(code: code) {
                // The handle failed: CurlMulti releases it after this call.
                guard let giveUp = parentFailed(p, route: route, cause: cause, connectStatus: h.parentConnectStatus)
                else { return }
                parentFailure = giveUp
            } else if code == CURLE_OK {
                route.routing.health.succeeded(p)
            }
        }
        guard code == CURLE_OK else {
            var error = UpstreamError(
                cause: UpstreamFailure(curl: code), detail: String(cString: h.errorBuffer), destination: destination,
                timeoutSeconds: timeoutSeconds)
            error.parent = parentFailure
            finish(.failure(error))
            return
        }
        var fd: curl_socket_t = -1
        guard ap_easy_getinfo_socket(h.raw, CURLINFO_ACTIVESOCKET, &fd) == CURLE_OK, fd >= 0 else {
            multi.releaseConnectOnly(h)
            finish(
                .failure(
                    UpstreamError(
                        cause: .connect, detail: "libcurl made no connection",
                        destination: destination, timeoutSeconds: timeoutSeconds)))
            return
        }
        finish(.success(CurlLink(multi: multi, easy: h, fd: fd)))
    }

    /// Records a failure at parent `p` and carries out ``ParentFailoverStep``: nil when another attempt started
    /// (the next parent, or the destination itself), else the failure to report.
    private func parentFailed(
        _ p: ParentProxy, route: ParentRoute, cause: ParentFailover.Cause, connectStatus: Int
    ) -> ParentFailure? {
        route.routing.health.failed(p, cause: cause)
        let failure = ParentFailure(
            parent: p, cause: cause, connectStatus: connectStatus, credential: route.routing.credentialName)
        // Connecting: nothing of an answer can have reached the client yet.
        switch ParentFailoverStep.after(
            failure, reachedClient: false, parentsLeft: parents.count - parentIndex - 1,
            fallbackDirect: route.fallbackDirect)
        {
        case .nextParent:
            parentIndex += 1
            attempt()
            return nil
        case .direct:
            wentDirect = true
            attempt()
            return nil
        case .giveUp(let f):
            return f
        }
    }

    private func finish(_ outcome: Result<CurlLink, UpstreamError>) {
        let d = done
        done = nil
        d?(outcome)
    }

    /// libcurl's one socket: the dialed one, handed over once (a second call is refused). From here on libcurl
    /// closes it, through the multi handle, which waits for every Dispatch source on it to be gone.
    fileprivate func openSocket() -> curl_socket_t {
        guard dialedFD >= 0 else { return CURL_SOCKET_BAD }
        let fd = dialedFD
        dialedFD = -1
        multi.socketOpened(fd)
        return fd
    }
}

/// The address `fd` is connected to.
private func peerAddress(_ fd: Int32) -> IPAddress? {
    var storage = sockaddr_storage()
    var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
    let ok = withUnsafeMutablePointer(to: &storage) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &len) } == 0
    }
    return ok ? IPAddress(storage) : nil
}

private func connectorOpenSocketCallback(
    _ ud: UnsafeMutableRawPointer?, _ purpose: curlsocktype,
    _ address: UnsafeMutablePointer<curl_sockaddr>?
) -> curl_socket_t {
    guard let ud else { return CURL_SOCKET_BAD }
    return Unmanaged<CurlConnector>.fromOpaque(ud).takeUnretainedValue().openSocket()
}

/// The socket from the open-socket callback is connected already. (libcurl 7.88 calls `connect` on it all the
/// same, curl issue 10626; Linux answers 0 to the first `connect` after a non-blocking one completed, as the
/// Dialer's did, so the connection goes on.)
private func connectorSocketOptionCallback(_ ud: UnsafeMutableRawPointer?, _ fd: curl_socket_t, _ purpose: curlsocktype)
    -> Int32
{
    Int32(CURL_SOCKOPT_ALREADY_CONNECTED)
}
