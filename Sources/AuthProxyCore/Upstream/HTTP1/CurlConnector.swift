import CAuthProxyShims
import CCurl
import Dispatch

/// Opens a connection that libcurl makes (`CONNECT_ONLY`) on the loop's multi handle and the proxy then reads and
/// writes itself through ``CurlLink``:
/// - a TLS connection to an `https://` upstream for the own HTTP/1.1 client (``HTTP1Transfer``), so name
///   resolution, `deny_destinations` at socket opening, the TLS handshake, certificate and host-name verification
///   and the server-trust settings (CA file, pinned key, no verification) are exactly libcurl's, as for every
///   other https transfer;
/// - a connection through a parent proxy (``ParentRoute``): libcurl reaches the parent (TLS to it for an
///   `https://` parent), sends CONNECT, answers its authentication (Basic, Digest, NTLM, Negotiate), then for
///   `tls` makes the TLS connection to the destination inside the tunnel. Without `tls` the tunnel is plain: a
///   blind tunnel's or a WebSocket's bytes. A parent that cannot be reached, does not answer, or refuses the
///   login is recorded in ``ParentHealth`` and the next parent is tried.
///
/// Confined to the loop's queue. `done` is called once, unless ``cancel()`` came first.
final class CurlConnector {
    private let multi: CurlMulti
    private let host: String
    private let port: Int
    private let tls: Bool
    private let trust: ServerTrustSettings?
    private let timeoutSeconds: Int
    private let destination: String
    private let deny: [AddressBlock]
    /// `deny_destinations`, for a direct connection after every parent failed.
    private let denyDirect: [AddressBlock]
    private var destinationCheck: DestinationCheck
    private let route: ParentRoute?
    private var parents: [ParentProxy] = []
    private var parentIndex = 0
    /// Every parent failed and the route allows the destination directly (a PAC file's trailing `DIRECT`).
    private var wentDirect = false
    private var easy: CurlEasyHandle?
    private var done: ((Result<CurlLink, UpstreamError>) -> Void)?

    init(
        multi: CurlMulti, urlHost: String, port: Int, tls: Bool = true, trust: ServerTrustSettings?,
        timeoutSeconds: Int,
        denyDestinations: [AddressBlock], route: ParentRoute? = nil
    ) {
        self.multi = multi
        self.host = urlHost
        self.port = port
        self.tls = tls
        self.trust = trust
        self.timeoutSeconds = timeoutSeconds
        self.route = route
        destination = "\(urlHost):\(port)"
        // Through a parent the sockets libcurl opens go to the parent (see ``UpstreamTransfer``).
        deny = route == nil ? denyDestinations : []
        denyDirect = denyDestinations
        destinationCheck = DestinationCheck(deny: deny)
        if let route { parents = route.routing.health.order(route.candidates) }
    }

    /// The parent in use (nil: direct).
    var parent: ParentProxy? { parents.isEmpty || wentDirect ? nil : parents[parentIndex] }

    func start(_ done: @escaping (Result<CurlLink, UpstreamError>) -> Void) {
        assertOnQueue(multi.queue)
        self.done = done
        attempt()
    }

    private func attempt() {
        guard let h = multi.makeConnectOnlyHandle() else {
            finish(
                .failure(
                    UpstreamError(
                        cause: .other("out of memory"), detail: "libcurl could not make a connection handle",
                        destination: destination, timeoutSeconds: timeoutSeconds)))
            return
        }
        easy = h
        let e = h.raw
        // The origin only: the request itself goes over the connection later, written by the own client.
        "\(tls ? "https" : "http")://\(host):\(port)/".withCString { _ = ap_easy_setopt_ptr(e, CURLOPT_URL, $0) }
        ap_easy_setopt_ptr(e, CURLOPT_OPENSOCKETDATA, Unmanaged.passUnretained(self).toOpaque())
        ap_easy_setopt_opensocket_cb(e, connectorOpenSocketCallback)
        h.setConnectTimeout(timeoutSeconds)
        if let trust, tls { h.applyTrust(trust) }
        if let route, let p = parent {
            h.applyParent(p, routing: route.routing, tunnel: true, https: tls)
            route.routing.health.attempted(p)
        }
        guard multi.addConnectOnly(h, connector: self) else {
            easy = nil
            finish(
                .failure(
                    UpstreamError(
                        cause: .other("libcurl refused the connection handle"),
                        detail: "libcurl refused the connection handle",
                        destination: destination, timeoutSeconds: timeoutSeconds)))
            return
        }
    }

    /// Stops connecting; `done` is not called.
    func cancel() {
        assertOnQueue(multi.queue)
        done = nil
        guard let h = easy else { return }
        easy = nil
        h.connector = nil
        // A removal deferred because libcurl is on the stack must not let that call open another address's socket
        // through this object once it is gone: the open callback refuses without its data pointer.
        ap_easy_setopt_ptr(h.raw, CURLOPT_OPENSOCKETDATA, nil)
        multi.releaseConnectOnly(h)
    }

    /// Called by ``CurlMulti`` when libcurl is done connecting. On success the handle now holds the connection.
    func finished(_ code: CURLcode, on h: CurlEasyHandle) {
        easy = nil
        guard done != nil else { return }
        var parentFailure: ParentFailure? = nil
        if let route, let p = parent {
            if let cause = h.parentFailure(code: code) {
                route.routing.health.failed(p, cause: cause)
                let failure = ParentFailure(
                    parent: p, cause: cause, connectStatus: h.parentConnectStatus,
                    credential: route.routing.credentialName)
                // Connecting: nothing of an answer can have reached the client yet.
                switch ParentFailoverStep.after(
                    failure, reachedClient: false, parentsLeft: parents.count - parentIndex - 1,
                    fallbackDirect: route.fallbackDirect)
                {
                case .nextParent:
                    // The handle failed: CurlMulti releases it after this call.
                    parentIndex += 1
                    destinationCheck = DestinationCheck(deny: deny)
                    attempt()
                    return
                case .direct:
                    // The destination itself now: deny_destinations applies to the sockets libcurl opens.
                    wentDirect = true
                    destinationCheck = DestinationCheck(deny: denyDirect)
                    attempt()
                    return
                case .giveUp(let f):
                    parentFailure = f
                }
            } else if code == CURLE_OK {
                route.routing.health.succeeded(p)
            }
        }
        guard code == CURLE_OK else {
            var error = destinationCheck.error(
                code: code, detail: String(cString: h.errorBuffer), destination: destination,
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

    private func finish(_ outcome: Result<CurlLink, UpstreamError>) {
        let d = done
        done = nil
        d?(outcome)
    }

    fileprivate func openSocket(_ address: UnsafePointer<curl_sockaddr>) -> curl_socket_t {
        destinationCheck.open(address, multi: multi)
    }
}

private func connectorOpenSocketCallback(
    _ ud: UnsafeMutableRawPointer?, _ purpose: curlsocktype,
    _ address: UnsafeMutablePointer<curl_sockaddr>?
) -> curl_socket_t {
    guard let ud, let address else { return CURL_SOCKET_BAD }
    return Unmanaged<CurlConnector>.fromOpaque(ud).takeUnretainedValue().openSocket(address)
}
