import CAuthProxyShims
import CCurl
import Dispatch

#if canImport(Glibc)
    import Glibc
#endif

/// libcurl's part of one ``Connector`` attempt: over a socket the ``Dialer`` connected (to the destination or to a
/// parent), libcurl (`CONNECT_ONLY`, on the loop's multi handle) makes the connection usable, and the proxy then
/// reads and writes it itself through ``CurlLink``:
/// - TLS to an `https://` upstream, so the handshake, certificate and host-name verification and the server-trust
///   settings (CA file, pinned key, no verification) are exactly libcurl's, as for every other https transfer;
/// - through a parent proxy: TLS to an `https://` parent, CONNECT, its authentication (Basic, Digest, NTLM,
///   Negotiate), then for `tls` the TLS connection to the destination inside the tunnel. Without `tls` the tunnel
///   is plain: a blind tunnel's or a WebSocket's bytes.
///
/// The order of attempts, the failover and `deny_destinations` are the ``Connector``'s; this object makes one
/// attempt and says how it failed. libcurl gets the connected socket from its open-socket callback (once), is told
/// by its socket-option callback that it is connected, and finds the dialed address pinned for the host
/// (``ResolvePin``): it resolves and connects nothing itself. From the open-socket call on the socket is libcurl's,
/// closed through the multi handle's close callback; until then it is this object's.
///
/// Confined to the loop's queue. `done` is called once, unless ``cancel()`` came first.
final class CurlConnector {
    /// How the attempt failed: the error for the client, and, through a parent, whether the parent is at fault
    /// (``CurlEasyHandle/parentFailure(code:parent:)``) with its answer to CONNECT.
    struct Failure: Error {
        var error: UpstreamError
        var parentCause: ParentFailover.Cause? = nil
        var connectStatus = 0
    }

    private let multi: CurlMulti
    /// The destination as in a URL (an IPv6 address in brackets).
    private let urlHost: String
    private let port: Int
    private let tls: Bool
    private let trust: ServerTrustSettings?
    /// Presented in the TLS handshake to the destination (a `certificate` credential).
    private let certificate: ClientCertificateSettings?
    private let parent: ParentProxy?
    private let routing: ParentRouting?
    private let timeoutSeconds: Int
    /// When the attempt's connect must be done (uptime ns): libcurl gets what is left of it.
    private let deadline: UInt64
    private var destination: String { "\(urlHost):\(port)" }
    /// The dialed socket until libcurl's open-socket callback takes it; -1 otherwise.
    private var dialedFD: Int32 = -1
    private var easy: CurlEasyHandle?
    private var done: ((Result<CurlLink, Failure>) -> Void)?

    init(
        multi: CurlMulti, urlHost: String, port: Int, tls: Bool, trust: ServerTrustSettings?,
        certificate: ClientCertificateSettings? = nil, parent: ParentProxy?, routing: ParentRouting?,
        timeoutSeconds: Int, deadline: UInt64
    ) {
        self.multi = multi
        self.urlHost = urlHost
        self.port = port
        self.tls = tls
        self.trust = trust
        self.certificate = tls ? certificate : nil
        self.parent = parent
        self.routing = routing
        self.timeoutSeconds = timeoutSeconds
        self.deadline = deadline
    }

    /// Stops connecting; `done` is not called.
    func cancel() {
        assertOnQueue(multi.queue)
        done = nil
        closeDialed()
        guard let h = easy else { return }
        easy = nil
        h.connector = nil
        // A removal deferred because libcurl is on the stack must not let that call take the socket through this
        // object once it is gone: the open callback refuses without its data pointer.
        ap_easy_setopt_ptr(h.raw, CURLOPT_OPENSOCKETDATA, nil)
        multi.releaseConnectOnly(h)
    }

    /// libcurl makes the connection over `fd`, connected by the Dialer to `peer` (the parent, or the destination).
    func start(
        over fd: Int32, dialedHost: String, dialedPort: Int, _ done: @escaping (Result<CurlLink, Failure>) -> Void
    ) {
        assertOnQueue(multi.queue)
        self.done = done
        guard !multi.isTornDown else {
            Glibc.close(fd)
            self.done = nil
            return
        }
        guard let h = multi.makeConnectOnlyHandle() else {
            Glibc.close(fd)
            finish(
                .failure(
                    Failure(
                        error: UpstreamError(
                            cause: .other("out of memory"), detail: "libcurl could not make a connection handle",
                            destination: destination, timeoutSeconds: timeoutSeconds))))
            return
        }
        easy = h
        dialedFD = fd
        let e = h.raw
        // The origin only: the request itself goes over the connection later, written by the own client.
        "\(tls ? "https" : "http")://\(urlHost):\(port)/".withCString { _ = ap_easy_setopt_ptr(e, CURLOPT_URL, $0) }
        ap_easy_setopt_ptr(e, CURLOPT_OPENSOCKETDATA, Unmanaged.passUnretained(self).toOpaque())
        ap_easy_setopt_opensocket_cb(e, connectorOpenSocketCallback)
        ap_easy_setopt_sockopt_cb(e, connectorSocketOptionCallback)
        if let peer = peerAddress(fd), let pin = ResolvePin.entry(host: dialedHost, port: dialedPort, address: peer) {
            h.pinResolve(pin)
        }
        // What is left of the attempt's time (the handle is new: no recorded timeout to keep in step).
        let now = DispatchTime.now().uptimeNanoseconds
        ap_easy_setopt_long(
            e, CURLOPT_CONNECTTIMEOUT_MS, deadline > now ? max(1, Int((deadline - now) / 1_000_000)) : 1)
        if let trust, tls { h.applyTrust(trust) }
        if let certificate { h.applyClientCertificate(certificate) }
        if let routing, let parent { h.applyParent(parent, routing: routing, tunnel: true, https: tls) }
        guard multi.addConnectOnly(h, connector: self) else {
            easy = nil
            closeDialed()
            finish(
                .failure(
                    Failure(
                        error: UpstreamError(
                            cause: .other("libcurl refused the connection handle"),
                            detail: "libcurl refused the connection handle",
                            destination: destination, timeoutSeconds: timeoutSeconds))))
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
        guard code == CURLE_OK else {
            var f = Failure(
                error: UpstreamError(
                    cause: UpstreamFailure(curl: code), detail: String(cString: h.errorBuffer),
                    destination: destination, timeoutSeconds: timeoutSeconds))
            if let parent {
                f.parentCause = h.parentFailure(code: code, parent: parent)
                f.connectStatus = h.parentConnectStatus
            }
            finish(.failure(f))
            return
        }
        var fd: curl_socket_t = -1
        guard ap_easy_getinfo_socket(h.raw, CURLINFO_ACTIVESOCKET, &fd) == CURLE_OK, fd >= 0 else {
            multi.releaseConnectOnly(h)
            finish(
                .failure(
                    Failure(
                        error: UpstreamError(
                            cause: .connect, detail: "libcurl made no connection",
                            destination: destination, timeoutSeconds: timeoutSeconds))))
            return
        }
        finish(.success(CurlLink(multi: multi, easy: h, fd: fd)))
    }

    private func finish(_ outcome: Result<CurlLink, Failure>) {
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
