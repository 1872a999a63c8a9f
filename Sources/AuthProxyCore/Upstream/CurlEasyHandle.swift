import CAuthProxyShims
import CCurl

/// One libcurl easy handle that ``CurlMulti`` pools across transfers, with the error buffer libcurl writes
/// into and a record of the per-request options it carries now.
///
/// Instead of `curl_easy_reset` plus ~20 `curl_easy_setopt` per request, the options that never change (no
/// signals, no proxy from the environment, HTTP/1.1, no content decoding, path as is, buffer size, TCP keep-alive,
/// the error buffer, the private pointer to this object and every callback function) are set once, when the
/// handle is made. Per-request options (URL, callback data pointers, header list) are set by every transfer; the
/// method options, `CONNECTTIMEOUT` and `FORBID_REUSE` are recorded here and put back to libcurl's defaults when
/// the next request does not use them, so a GET after a GET sets none of them. (Measured: setting up a transfer
/// is well under 1 µs either way; see docs/BENCHMARKS.md, "Issue 10 levers".)
///
/// **Reuse rule — no credential setting may reach another request:** a handle that carried a network
/// credential (user name and password or `HTTPAUTH`, Kerberos, client certificate) or a total `TIMEOUT`
/// (``carriesCredential``) is `curl_easy_reset` (then given its fixed options again) before it goes back to the
/// pool. Server-trust settings (CA file, pinned key, no verification) are not secrets but change how a peer is
/// verified: a handle with them (``trust``) is kept in a separate pool and reused only for requests with the
/// same trust settings.
///
/// Ownership: confined to its ``CurlMulti``'s queue, like the multi handle itself.
final class CurlEasyHandle {
    let raw: UnsafeMutableRawPointer
    /// `CURLOPT_ERRORBUFFER`, set once; libcurl clears it when a transfer starts.
    let errorBuffer: UnsafeMutablePointer<CChar>
    /// The server-trust settings applied (the handle's pool), nil for none.
    private(set) var trust: ServerTrustSettings? = nil
    /// `trust != nil`, without copying the optional (checked for every request).
    private(set) var hasTrust = false
    /// A credential or `TIMEOUT` was applied: the handle must be reset before reuse.
    private(set) var carriesCredential = false
    /// While the handle is in the multi handle: the object it works for (so a deferred cancel or unpause never
    /// touches a handle that finished meanwhile and was handed to another transfer), and the transfer told when
    /// libcurl reports it done (nil once that transfer was cancelled). `CURLOPT_PRIVATE` points at the handle.
    var owner: ObjectIdentifier? = nil
    var transfer: Unmanaged<CurlTransfer>? = nil
    /// A `CONNECT_ONLY` handle (``CurlMulti/makeConnectOnlyHandle()``): it makes one connection (TLS, a parent's
    /// CONNECT) over a socket the ``Dialer`` connected, for ``CurlConnector``, and stays in the multi handle for
    /// that connection's life. It has a connection cache and a DNS cache of its own (`share`), so no other
    /// transfer's pruning of dead or old connections ever looks at it, and its ``pinResolve(_:)`` entry reaches
    /// no other transfer. Never pooled for another request.
    private(set) var share: UnsafeMutableRawPointer? = nil
    var isConnectOnly: Bool { share != nil }
    /// `CURLOPT_PROXYHEADER`'s list (the `Via` of a CONNECT to a parent), freed when the handle is reset or
    /// cleaned up.
    var proxyHeaders: UnsafeMutablePointer<curl_slist>? = nil
    /// `CURLOPT_RESOLVE`'s list on a `CONNECT_ONLY` handle (the address its connection was dialed to), freed
    /// when the handle is cleaned up.
    private var resolvePins: UnsafeMutablePointer<curl_slist>? = nil
    /// While connecting: who hears that libcurl is done (nil once it was cancelled).
    var connector: Unmanaged<CurlConnector>? = nil

    // Per-request options whose current value differs from libcurl's default only when a request set it.
    private var noBody = false
    private var upload = false
    private var customRequest: String? = nil
    private var inFileSize: Int64 = -1
    private var forbidReuse = false
    private var freshConnect = false
    private var connectTimeout = 0

    /// How the request line and body are chosen (`NOBODY`, `UPLOAD`, `CUSTOMREQUEST`, `INFILESIZE_LARGE`).
    struct Method: Equatable {
        var noBody = false
        var upload = false
        var customRequest: String? = nil
        var inFileSize: Int64 = -1

        /// The options for `method` (`isHead`: it is HEAD) with an optional body (`nil`: none, -1: unknown length,
        /// sent chunked).
        init(method: String, isHead: Bool, bodyLength: Int64?) {
            if isHead {
                noBody = true
            } else if bodyLength != nil || method != "GET" {
                // UPLOAD alone would make libcurl send PUT: name the method whenever there is a body.
                customRequest = method
            }
            if let bodyLength {
                upload = true
                inFileSize = bodyLength
            }
        }
    }

    init(multi: CurlMulti) {
        guard let e = curl_easy_init() else { fatalError("curl_easy_init failed") }
        raw = e
        errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
        errorBuffer[0] = 0
        applyFixedOptions(multi: multi)
    }

    /// Only ``CurlMulti`` calls this, after the handle left the multi handle for good.
    func cleanup() {
        curl_easy_cleanup(raw)
        if let l = proxyHeaders { curl_slist_free_all(l) }
        proxyHeaders = nil
        if let share { ap_share_free(share) }
        share = nil
        if let l = resolvePins { curl_slist_free_all(l) }
        resolvePins = nil
        errorBuffer.deallocate()
    }

    /// Makes this (new) handle a `CONNECT_ONLY` one with connection and DNS caches of its own; false when libcurl
    /// could not make the share handle.
    func makeConnectOnly() -> Bool {
        guard share == nil, let sh = ap_share_connections_new() else { return false }
        share = sh
        ap_easy_setopt_ptr(raw, CURLOPT_SHARE, sh)
        ap_easy_setopt_long(raw, CURLOPT_CONNECT_ONLY, 1)
        ap_easy_connect_only_tls(raw)
        return true
    }

    /// Has this `CONNECT_ONLY` handle take `entry` (`host:port:address`, ``ResolvePin``) as the answer for that
    /// host and port: libcurl looks up nothing itself. The entry stays in the handle's own DNS cache (its share).
    func pinResolve(_ entry: String) {
        precondition(isConnectOnly && resolvePins == nil, "a pin goes on a new CONNECT_ONLY handle, once")
        resolvePins = entry.withCString { curl_slist_append(nil, $0) }
        ap_easy_setopt_ptr(raw, CURLOPT_RESOLVE, resolvePins)
    }

    /// Back to a fresh handle's state (every option at its default), then the fixed options again.
    func reset(multi: CurlMulti) {
        curl_easy_reset(raw)
        if let l = proxyHeaders { curl_slist_free_all(l) }
        proxyHeaders = nil
        trust = nil
        hasTrust = false
        carriesCredential = false
        noBody = false
        upload = false
        customRequest = nil
        inFileSize = -1
        forbidReuse = false
        freshConnect = false
        connectTimeout = 0
        applyFixedOptions(multi: multi)
    }

    /// Sets the method options that differ from what the handle carries. `UPLOAD` and `NOBODY` both change
    /// libcurl's method, so when either changes both are cleared first (clearing `UPLOAD` means GET) and then
    /// the wanted one is set.
    func setMethod(_ m: Method) {
        if m.noBody != noBody || m.upload != upload {
            if upload { ap_easy_setopt_long(raw, CURLOPT_UPLOAD, 0) }
            if noBody { ap_easy_setopt_long(raw, CURLOPT_NOBODY, 0) }
            if m.noBody { ap_easy_setopt_long(raw, CURLOPT_NOBODY, 1) }
            if m.upload { ap_easy_setopt_long(raw, CURLOPT_UPLOAD, 1) }
            noBody = m.noBody
            upload = m.upload
        }
        if m.customRequest != customRequest {
            if let c = m.customRequest {
                c.withCString { _ = ap_easy_setopt_ptr(raw, CURLOPT_CUSTOMREQUEST, $0) }
            } else {
                ap_easy_setopt_ptr(raw, CURLOPT_CUSTOMREQUEST, nil)
            }
            customRequest = m.customRequest
        }
        if m.inFileSize != inFileSize {
            ap_easy_setopt_off(raw, CURLOPT_INFILESIZE_LARGE, curl_off_t(m.inFileSize))
            inFileSize = m.inFileSize
        }
    }

    /// `FORBID_REUSE`: close the connection when this transfer ends. Also called mid-transfer (a bodiless
    /// answer); the next request puts it back.
    func setForbidReuse(_ on: Bool) {
        guard on != forbidReuse else { return }
        ap_easy_setopt_long(raw, CURLOPT_FORBID_REUSE, on ? 1 : 0)
        forbidReuse = on
    }

    func setFreshConnect(_ on: Bool) {
        guard on != freshConnect else { return }
        ap_easy_setopt_long(raw, CURLOPT_FRESH_CONNECT, on ? 1 : 0)
        freshConnect = on
    }

    func setConnectTimeout(_ seconds: Int) {
        guard seconds != connectTimeout else { return }
        ap_easy_setopt_long(raw, CURLOPT_CONNECTTIMEOUT, seconds)
        connectTimeout = seconds
    }

    /// Applies server-trust settings to a handle that has none (a handle from the plain pool).
    func applyTrust(_ t: ServerTrustSettings) {
        precondition(!hasTrust, "a trusted handle is only reused for the same trust settings")
        trust = t
        hasTrust = true
        if let ca = t.caFile {
            // Added to the system CAs (CAPATH), not instead of them. As the bytes read at load time: libcurl
            // matches cached connections by the blob's contents, where by a path it would reuse a connection
            // verified with a bundle since changed.
            if let pem = t.caBundle {
                pem.withUnsafeBytes { b in
                    var blob = curl_blob(
                        data: UnsafeMutableRawPointer(mutating: b.baseAddress), len: b.count,
                        flags: UInt32(CURL_BLOB_COPY))
                    _ = ap_easy_setopt_ptr(raw, CURLOPT_CAINFO_BLOB, &blob)
                }
            } else {
                ap_easy_setopt_ptr(raw, CURLOPT_CAINFO, ca)
            }
            ap_easy_setopt_ptr(raw, CURLOPT_CAPATH, "/etc/ssl/certs")
        }
        if let pin = t.pinnedPublicKey {
            // The pin is the check for a self-signed server; the host name is still verified.
            ap_easy_setopt_ptr(raw, CURLOPT_PINNEDPUBLICKEY, pin)
            ap_easy_setopt_long(raw, CURLOPT_SSL_VERIFYPEER, 0)
        }
        if t.insecure {
            ap_easy_setopt_long(raw, CURLOPT_SSL_VERIFYPEER, 0)
            ap_easy_setopt_long(raw, CURLOPT_SSL_VERIFYHOST, 0)
        }
    }

    /// To be called before any credential or `TIMEOUT` option is set: the handle is reset when it comes back.
    func markCarriesCredential() {
        carriesCredential = true
    }
}
