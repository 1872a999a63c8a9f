import CAuthProxyShims
import CCurl
import Dispatch

/// Opens a TLS connection to an `https://` upstream for the proxy's own HTTP/1.1 client (``HTTP1Transfer``):
/// libcurl connects (`CONNECT_ONLY`) on the loop's multi handle, so name resolution, `deny_destinations` at
/// socket opening, the TLS handshake, certificate and host-name verification and the server-trust settings
/// (CA file, pinned key, no verification) are exactly libcurl's, as for every other https transfer. The
/// connection it makes is then used through ``CurlTLSLink``.
///
/// Confined to the loop's queue. `done` is called once, unless ``cancel()`` came first.
final class TLSConnector {
    private let multi: CurlMulti
    private let host: String
    private let port: Int
    private let trust: ServerTrustSettings?
    private let timeoutSeconds: Int
    private let destination: String
    private var destinationCheck: DestinationCheck
    private var easy: CurlEasyHandle?
    private var done: ((Result<CurlTLSLink, UpstreamError>) -> Void)?

    init(multi: CurlMulti, urlHost: String, port: Int, trust: ServerTrustSettings?, timeoutSeconds: Int,
        denyDestinations: [AddressBlock])
    {
        self.multi = multi
        self.host = urlHost
        self.port = port
        self.trust = trust
        self.timeoutSeconds = timeoutSeconds
        destination = "\(urlHost):\(port)"
        destinationCheck = DestinationCheck(deny: denyDestinations)
    }

    func start(_ done: @escaping (Result<CurlTLSLink, UpstreamError>) -> Void) {
        assertOnQueue(multi.queue)
        guard let h = multi.makeConnectOnlyHandle() else {
            done(.failure(UpstreamError(cause: .other("out of memory"), detail: "libcurl could not make a connection handle",
                destination: destination, timeoutSeconds: timeoutSeconds)))
            return
        }
        self.done = done
        easy = h
        let e = h.raw
        // The origin only: the request itself goes over the connection later, written by the own client.
        "https://\(host):\(port)/".withCString { _ = ap_easy_setopt_ptr(e, CURLOPT_URL, $0) }
        ap_easy_setopt_ptr(e, CURLOPT_OPENSOCKETDATA, Unmanaged.passUnretained(self).toOpaque())
        ap_easy_setopt_opensocket_cb(e, connectorOpenSocketCallback)
        h.setConnectTimeout(timeoutSeconds)
        if let trust { h.applyTrust(trust) }
        guard multi.addConnectOnly(h, connector: self) else {
            easy = nil
            self.done = nil
            done(.failure(UpstreamError(cause: .other("libcurl refused the connection handle"), detail: "libcurl refused the connection handle",
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
        guard let d = done else { return }
        done = nil
        guard code == CURLE_OK else {
            d(.failure(destinationCheck.error(code: code, detail: String(cString: h.errorBuffer), destination: destination,
                timeoutSeconds: timeoutSeconds)))
            return
        }
        var fd: curl_socket_t = -1
        guard ap_easy_getinfo_socket(h.raw, CURLINFO_ACTIVESOCKET, &fd) == CURLE_OK, fd >= 0 else {
            multi.releaseConnectOnly(h)
            d(.failure(UpstreamError(cause: .connect, detail: "libcurl made no connection",
                destination: destination, timeoutSeconds: timeoutSeconds)))
            return
        }
        d(.success(CurlTLSLink(multi: multi, easy: h, fd: fd)))
    }

    fileprivate func openSocket(_ address: UnsafePointer<curl_sockaddr>) -> curl_socket_t {
        destinationCheck.open(address, multi: multi)
    }
}

private func connectorOpenSocketCallback(_ ud: UnsafeMutableRawPointer?, _ purpose: curlsocktype,
    _ address: UnsafeMutablePointer<curl_sockaddr>?) -> curl_socket_t
{
    guard let ud, let address else { return CURL_SOCKET_BAD }
    return Unmanaged<TLSConnector>.fromOpaque(ud).takeUnretainedValue().openSocket(address)
}
