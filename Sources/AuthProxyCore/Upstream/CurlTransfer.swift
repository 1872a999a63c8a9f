import CAuthProxyShims
import CCurl

#if canImport(Glibc)
    import Glibc
#endif

/// One exchange with an upstream server, on a pooled libcurl easy handle (``CurlEasyHandle``).
///
/// Used only where libcurl is the point (``UpstreamClient/choose(configured:network:route:upstreamScheme:isUpgrade:)``):
/// `http_client = "libcurl"`, network credentials (NTLM and Negotiate handshakes bound to libcurl's cached
/// connection, Basic and Digest challenges, client certificates), plain http through a parent whose login is
/// negotiated from its 407 or that is reached over TLS, and the proxy's own fetches (``HTTPFetch``). Everything
/// else connects through the ``Connector``. Unlike it, libcurl resolves and connects here itself, so
/// `deny_destinations` is applied as it opens each socket (``DestinationCheck``) and the parents' failover follows
/// the same
/// ``ConnectAttempts``.
///
/// Confined to its event loop's queue; libcurl calls back through `Unmanaged` pointers to the transfer (the
/// callbacks' data pointers, and the handle's ``CurlEasyHandle/transfer``), so the transfer must stay alive until
/// ``finished(_:on:)`` or ``cancel()``.
final class CurlTransfer {
    let multi: CurlMulti
    private(set) var easy: CurlEasyHandle?
    private var headers: UnsafeMutablePointer<curl_slist>?
    /// Not `weak`: a weak reference gives every delegate a side table (48 bytes kept for the life of a client
    /// connection) and costs an atomic load per callback. The rule that makes `unowned(unsafe)` sound: a delegate
    /// never goes away while its transfer can still call it. ``ClientConnection`` keeps its transfer in its
    /// exchange and cancels it (which clears this) wherever it drops it, in `close()` and, as a backstop, in
    /// `deinit`; ``HTTPFetch`` keeps itself alive until ``UpstreamExchangeDelegate/transferDidFinish(error:)``.
    /// After ``cancel()`` or ``finished(_:on:)`` this is nil and no callback reaches the delegate.
    private unowned(unsafe) var delegate: (any UpstreamExchangeDelegate)?
    private var paused = false
    let request: UpstreamRequest
    /// Host and port for error messages.
    let destination: String
    /// `deny_destinations` at socket opening, and what it saw.
    private var destinationCheck: DestinationCheck
    /// Status of the response head being read (1xx heads included).
    private var status = 0
    /// A response line arrived since the request (or its last rewind) went out: a rewind now is for an
    /// authentication round, not for a connection that died with the request unanswered.
    private var answeredSinceSend = false
    /// ``rewind()`` refused to send a non-idempotent request again.
    private var refusedResend = false
    /// The parents of the route in the order tried and the one in use, and the failover between them
    /// (``ConnectAttempts``, as for the ``Connector``'s connections).
    private var attempts: ConnectAttempts
    /// Through a parent now (a route, and not gone direct after them).
    private var viaParent: Bool { attempts.parent != nil }
    /// A header line reached the delegate: the transfer can no longer move to another parent.
    private var delivered = false
    /// Request-body bytes were taken from the delegate (another parent needs them rewound).
    private var bodyTaken = false
    /// The schemes of the parent's 407 being read.
    private var parentOffers: Set<String> = []
    /// The parent's part of a traced attempt (``UpstreamRequest/trace``) through a parent, while it lasts: a child
    /// span of the attempt, as the ``Connector`` makes for the own client, and which heads are the parent's.
    private var parentSpan: ParentConnectSpan?
    private var parentHeads = ParentExchangeHeads(tunnel: false)

    init(multi: CurlMulti, request: UpstreamRequest, destination: String, delegate: any UpstreamExchangeDelegate) {
        self.multi = multi
        self.request = request
        self.destination = destination
        self.delegate = delegate
        // Through a parent, libcurl opens sockets to the parent only: an address the operator chose, or one a PAC
        // file named (checked, ``ParentRoute/parentDeny``; all denied is ``ConnectAttempts/Outcome/denied(_:)``);
        // the destination's address is checked where it is known (``RequestPlanner``, IP literals).
        destinationCheck = DestinationCheck(deny: request.parentRoute?.parentDeny ?? request.denyDestinations)
        attempts = ConnectAttempts(route: request.parentRoute)
    }

    deinit {
        if let headers { curl_slist_free_all(headers) }
    }

    /// Takes a pooled handle, sets the per-request options (the fixed ones are already there, see
    /// ``CurlEasyHandle``) and adds it to the multi handle.
    func start() {
        assertOnQueue(multi.queue)
        // Matched rather than copied into a local: most requests have no trust settings, and copying the optional
        // showed up in profiles.
        let h: CurlEasyHandle
        if case .some(let trust) = request.network.trust {
            h = multi.makeEasyHandle(trust: trust)
            // A handle from the pool for these settings has them already; one from the plain pool gets them.
            if !h.hasTrust { h.applyTrust(trust) }
            precondition(h.trust == trust, "an easy handle with other server-trust settings")
        } else {
            h = multi.makeEasyHandle()
            precondition(!h.hasTrust, "an easy handle with server-trust settings for a request without")
        }
        easy = h
        let e = h.raw
        let me = Unmanaged.passUnretained(self).toOpaque()
        h.errorBuffer[0] = 0
        // withCString: a String passed as `const void *` would be copied into a temporary array first.
        request.url.withCString { _ = ap_easy_setopt_ptr(e, CURLOPT_URL, $0) }
        // Every callback's data pointer, also for callbacks this request will not use: none may point at an
        // earlier transfer.
        ap_easy_setopt_ptr(e, CURLOPT_OPENSOCKETDATA, me)
        ap_easy_setopt_ptr(e, CURLOPT_PREREQDATA, me)
        ap_easy_setopt_ptr(e, CURLOPT_HEADERDATA, me)
        ap_easy_setopt_ptr(e, CURLOPT_WRITEDATA, me)
        ap_easy_setopt_ptr(e, CURLOPT_READDATA, me)
        // libcurl rewinds to resend a body on a fresh connection (a kept-alive one turned out dead).
        ap_easy_setopt_ptr(e, CURLOPT_SEEKDATA, me)
        h.setConnectTimeout(request.timeoutSeconds)
        let isHead = request.method == "HEAD"
        h.setMethod(CurlEasyHandle.Method(method: request.method, isHead: isHead, bodyLength: request.bodyLength))
        // Bytes after a HEAD answer can't be told from a late body: never pool the connection.
        h.setForbidReuse(isHead && !multi.ownedByOneClient)
        // libcurl sends a request again on a new connection when a reused one dies before the answer, whatever
        // the method (``ResendPolicy``). With a body it rewinds first, and ``rewind()`` refuses; a
        // non-idempotent request without a body has nothing to rewind, so it never takes a reused connection.
        // (A client's own connections are exempt: its NTLM handshake lives on the connection, and its empty
        // negotiation POSTs must stay on it.)
        h.setFreshConnect(!multi.ownedByOneClient && (request.bodyLength ?? 0) == 0 && !request.resendable)
        if request.network.hasCredential || request.totalTimeoutSeconds != nil {
            h.markCarriesCredential()
            if let total = request.totalTimeoutSeconds { ap_easy_setopt_long(e, CURLOPT_TIMEOUT, total) }
            applyNetworkAuth(h)
        }
        if let route = request.parentRoute, let parent = attempts.parent {
            // A Proxy-Authorization for the destination (an identity-aware proxy's token) would be the parent's in an
            // absolute-form request: such a request goes through a CONNECT tunnel, as the own client sends every one.
            let tunnel = request.fields.forwardsProxyAuthorization, https = request.url.hasPrefix("https:")
            h.applyParent(parent, routing: route.routing, tunnel: tunnel, https: https)
            route.routing.health.attempted(parent)
            if let trace = request.trace { beginParentSpan(trace, parent: parent, tunnel: tunnel || https, on: h) }
        }
        var list: UnsafeMutablePointer<curl_slist>? = nil
        for line in Self.headerLines(request) { list = line.withCString { curl_slist_append(list, $0) } }
        headers = list
        ap_easy_setopt_ptr(e, CURLOPT_HTTPHEADER, list)
        multi.add(h, transfer: self)
    }

    /// The request's fields in libcurl's syntax (`Name;` for an empty value), with `Expect:` and, when the request
    /// has none, `Accept:` so that libcurl adds no header the client did not send.
    static func headerLines(_ request: UpstreamRequest) -> [String] {
        var lines: [String] = []
        lines.reserveCapacity(request.fields.count + 3)
        var hasAccept = false
        request.fields.forEachForwardedField { name, value in
            if name.caseInsensitiveEquals("accept") { hasAccept = true }
            lines.append(value.isEmpty ? "\(name);" : "\(name): \(value)")
        }
        if let via = request.via { lines.append("Via: \(via)") }
        lines.append("Expect:")
        if !hasAccept { lines.append("Accept:") }
        return lines
    }

    /// libcurl's CURLAUTH_* bits (macros with casts that Swift does not import).
    static let authBasic = 1, authDigest = 2, authNegotiate = 4, authNTLM = 8

    /// Password, Kerberos and client-certificate settings. Negotiate is offered only with a Kerberos identity:
    /// against a server offering Negotiate + NTLM, libcurl would otherwise pick Negotiate and fail instead of
    /// using NTLM.
    private func applyNetworkAuth(_ h: CurlEasyHandle) {
        let e = h.raw
        let n = request.network
        var mask = 0
        if let pw = n.password {
            if pw.schemes.contains(.basic) && (request.url.hasPrefix("https:") || pw.allowBasicOverHTTP) {
                mask |= Self.authBasic
            }
            if pw.schemes.contains(.digest) { mask |= Self.authDigest }
            if pw.schemes.contains(.ntlm) { mask |= Self.authNTLM }
            if mask != 0 {
                ap_easy_setopt_ptr(e, CURLOPT_USERNAME, pw.curlUser)
                ap_easy_setopt_ptr(e, CURLOPT_PASSWORD, pw.password)
            }
        }
        if n.kerberos != nil {
            mask |= Self.authNegotiate
            if n.password == nil {
                // GSS-API takes the identity from the credential cache; libcurl still wants a (blank) user.
                ap_easy_setopt_ptr(e, CURLOPT_USERPWD, ":")
            }
        }
        if mask != 0 { ap_easy_setopt_long(e, CURLOPT_HTTPAUTH, mask) }
        if let c = n.certificate { h.applyClientCertificate(c) }
    }

    /// Resumes a transfer paused by ``BodyAcceptance/pause`` or ``BodySupply/pause``.
    func resume() {
        assertOnQueue(multi.queue)
        guard paused, let easy else { return }
        paused = false
        multi.unpause(easy, owner: self)
    }

    /// Aborts the transfer; no delegate call follows.
    func cancel() {
        assertOnQueue(multi.queue)
        delegate = nil
        if parentSpan != nil, parentHeads.transferEnded() { endParentSpan(status: 0, error: "cancelled") }
        guard let h = easy else { return }
        easy = nil
        // If libcurl reports the handle done before a deferred removal runs, nobody is to be told.
        if h.owner == ObjectIdentifier(self) { h.transfer = nil }
        multi.cancel(h, owner: self)
    }

    /// Called by ``CurlMulti`` when libcurl reports the transfer done.
    func finished(_ code: CURLcode, on h: CurlEasyHandle) {
        easy = nil
        var parentError: ConnectAttempts.Failure? = nil
        if let route = request.parentRoute, let parent = attempts.parent {
            let outcome: ConnectAttempts.Outcome?
            if let ip = destinationCheck.deniedAddress, !destinationCheck.openedAny {
                // Every address of a PAC file's parent is denied: libcurl never connected to it.
                outcome = .denied(ip)
            } else if let cause = code == CURLE_OK && status == 407
                ? .auth : h.parentFailure(code: code, parent: parent)
            {
                route.routing.health.failed(parent, cause: cause)
                outcome = .failed(cause, status: h.parentConnectStatus)
            } else {
                outcome = nil
                if code == CURLE_OK { route.routing.health.succeeded(parent) }
            }
            if let outcome {
                endParentSpan(outcome, on: h)
                // Another parent, or the destination, gets the request only if nothing reached the client and a body
                // already taken goes again from its start.
                let step = attempts.failed(outcome) {
                    !delivered && delegate != nil && (!bodyTaken || delegate?.transferRewindBody() == true)
                }
                switch step {
                case .attempt(let next):
                    // libcurl opens sockets to the next parent, or to the destination: deny_destinations as it applies
                    // there.
                    destinationCheck = DestinationCheck(
                        deny: next == .direct ? request.denyDestinations : route.parentDeny)
                    status = 0
                    bodyTaken = false
                    answeredSinceSend = false
                    start()
                    return
                case .fail(let f):
                    parentError = f
                }
            }
        }
        let d = delegate
        delegate = nil
        var error =
            code == CURLE_OK && parentError == nil
            ? nil
            : destinationCheck.error(
                code: code, detail: String(cString: h.errorBuffer),
                destination: destination, timeoutSeconds: request.timeoutSeconds)
        if let parentError, let route = request.parentRoute {
            error?.failedAtParents(parentError, pac: route.fromPac ? route.routing.config.pac?.description : nil)
        }
        if refusedResend, error != nil {
            error = UpstreamError(
                cause: .nothing, detail: "", destination: destination,
                timeoutSeconds: request.timeoutSeconds)
            error?.notResent = request.method
        }
        if parentSpan != nil, parentHeads.transferEnded() {
            // Never past the parent, and not for a failure of the parent's own (that ended it above).
            endParentSpan(
                status: parentHeads.tunnel ? h.parentConnectStatus : 0, error: error.map(ExchangeTrace.errorType))
        }
        d?.transferDidFinish(error: error)
    }

    /// `CURLOPT_OPENSOCKETFUNCTION`: refuses denied destinations, opens the socket, and registers it with the
    /// multi handle (which closes it only after its Dispatch sources are gone).
    fileprivate func openSocket(_ address: UnsafePointer<curl_sockaddr>) -> curl_socket_t {
        destinationCheck.open(address, multi: multi)
    }

    /// libcurl rewinds the body to send it again: after an authentication round (a 401 answered the request,
    /// so it was not processed), or because a reused connection died before any answer, when the server may
    /// have processed what it read: then only an idempotent request goes again (``ResendPolicy``).
    fileprivate func rewind() -> Bool {
        if !answeredSinceSend, !request.resendable {
            refusedResend = true
            return false
        }
        answeredSinceSend = false
        return delegate?.transferRewindBody() ?? false
    }

    fileprivate func header(_ p: UnsafeRawBufferPointer) -> Int {
        guard let d = delegate else { return 0 }
        let statusLine = p.count >= 12 && p.starts(with: "HTTP/".utf8)
        if parentSpan != nil, parentHeads.readsConnectAnswer {
            // The parent's answer to the CONNECT (shown to this callback only for its span): never the client's.
            if statusLine { _ = parentHeads.statusLine(Self.statusCode(p)) }
            return p.count
        }
        answeredSinceSend = true
        if statusLine {
            status = Self.statusCode(p)
            if parentSpan != nil, parentHeads.statusLine(status) { endParentSpan(status: 0, error: nil) }
        }
        // A 407 through a parent is the parent's (libcurl answers its challenges; one left is a refusal): neither
        // its head nor its body reaches the client. The schemes it offers are noted for the parent.
        if status == 407, viaParent, let route = request.parentRoute {
            noteParentOffer(p, route: route)
            return p.count
        }
        delivered = true
        if p.count <= 2, status == 204 || status == 304, !multi.ownedByOneClient, let easy {
            // A bodiless answer: late bytes after it (a body it should not have) could only be caught by the
            // peek before reuse if they arrived in time. Closing costs one connection per 204/304 and leaves
            // no window for one client's response to reach another. (The handle records it; the next request
            // on the handle puts it back.)
            easy.setForbidReuse(true)
        }
        d.transferDidReceiveHeaderLine(p)
        // Cancelled from the callback (a refused head, a token rejection): stop libcurl reading this response now.
        return delegate == nil ? 0 : p.count
    }

    /// The status of a status line (`HTTP/1.1 200 …`, at least 12 bytes).
    private static func statusCode(_ p: UnsafeRawBufferPointer) -> Int {
        Int(p[9] &- 48) * 100 + Int(p[10] &- 48) * 10 + Int(p[11] &- 48)
    }

    // MARK: the parent's span

    /// The attempt goes through `parent`: its part gets a span under the attempt's. Through a tunnel libcurl is
    /// told to show the parent's answers to the CONNECT to the header callback (``header(_:)`` keeps them from the
    /// client) while the span records: its 407s are counted there.
    private func beginParentSpan(_ trace: ProxySpan, parent: ParentProxy, tunnel: Bool, on h: CurlEasyHandle) {
        let tunnel = tunnel || parent.scheme == .socks5h
        let span = ParentConnectSpan(
            parent: trace, proxy: parent, destination: destination, method: tunnel ? "CONNECT" : request.method)
        if span.isRecording, tunnel { ap_easy_setopt_long(h.raw, CURLOPT_SUPPRESS_CONNECT_HEADERS, 0) }
        parentSpan = span
        parentHeads = ParentExchangeHeads(tunnel: tunnel)
    }

    /// libcurl's pre-request callback: the connection is ready (through a tunnel, the parent's part is over).
    fileprivate func connectionReady() {
        guard parentSpan != nil, parentHeads.connectionReady(opened: destinationCheck.openedAny) else { return }
        endParentSpan(status: parentHeads.connectStatus, error: nil)
    }

    /// The parent failed the attempt (the next parent, or the destination, may get it).
    private func endParentSpan(_ outcome: ConnectAttempts.Outcome, on h: CurlEasyHandle) {
        guard parentSpan != nil, parentHeads.transferEnded() else { return }
        let answer = parentHeads.tunnel ? h.parentConnectStatus : (status == 407 ? 407 : 0)
        switch outcome {
        case .denied: endParentSpan(status: 0, error: "denied")
        case .failed(let cause, _): endParentSpan(status: answer, error: "\(cause)")
        }
    }

    private func endParentSpan(status: Int, error: String?) {
        parentSpan?.end(parentHeads, status: status, error: error)
        parentSpan = nil
    }

    /// The schemes of a parent's 407, collected line by line and recorded at the end of its head.
    private func noteParentOffer(_ line: UnsafeRawBufferPointer, route: ParentRoute) {
        if line.count >= 5, line.starts(with: "HTTP/".utf8) {
            parentOffers = []
        } else if line.count <= 2 {
            if !parentOffers.isEmpty, let parent = attempts.parent {
                route.routing.health.offered(parent, schemes: parentOffers)
            }
        } else {
            let text = String(decoding: line, as: UTF8.self)
            guard let colon = text.firstIndex(of: ":"), text[..<colon].caseInsensitiveEquals("proxy-authenticate")
            else { return }
            let value = text[text.index(after: colon)...].trimmingHTTPWhitespace()
            if let scheme = value.split(separator: " ").first { parentOffers.insert(scheme.lowercased()) }
        }
    }

    fileprivate func body(_ p: UnsafeRawBufferPointer) -> Int {
        guard let d = delegate else { return 0 }
        if status == 407, viaParent { return p.count }
        switch d.transferDidReceiveBody(p) {
        case .accepted: return p.count
        case .pause:
            paused = true
            return Int(CURL_WRITEFUNC_PAUSE)
        case .abort: return 0
        }
    }

    fileprivate func read(_ p: UnsafeMutableRawBufferPointer) -> Int {
        guard let d = delegate else { return Int(CURL_READFUNC_ABORT) }
        switch d.transferNeedsBody(p) {
        case .bytes(let n):
            bodyTaken = true
            return n
        case .end: return 0
        case .pause:
            paused = true
            return Int(CURL_READFUNC_PAUSE)
        case .abort: return Int(CURL_READFUNC_ABORT)
        }
    }
}

extension NetworkAuth {
    /// A setting libcurl would keep on the easy handle and that must not reach another request: a password, a
    /// Kerberos identity or a client certificate (server trust is pooled apart, see ``CurlEasyHandle``).
    var hasCredential: Bool {
        // Matched, not compared with nil: `!= nil` copied each (large) optional first.
        if case .some = password { return true }
        if case .some = kerberos { return true }
        if case .some = certificate { return true }
        return false
    }
}

extension CurlEasyHandle {
    /// The options every transfer uses with the same value: set when the handle is made and after a reset.
    /// The callbacks find their transfer through the per-request data pointers that ``CurlTransfer/start()``
    /// sets.
    func applyFixedOptions(multi: CurlMulti) {
        let e = raw
        ap_easy_setopt_ptr(e, CURLOPT_ERRORBUFFER, errorBuffer)
        // The handle itself: CurlMulti finds its transfer through it (``CurlEasyHandle/transfer``).
        ap_easy_setopt_ptr(e, CURLOPT_PRIVATE, Unmanaged.passUnretained(self).toOpaque())
        ap_easy_setopt_long(e, CURLOPT_NOSIGNAL, 1)
        // Never take a proxy from the environment: clients point HTTP_PROXY at us.
        ap_easy_setopt_ptr(e, CURLOPT_PROXY, "")
        ap_easy_setopt_long(e, CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_1_1))
        ap_easy_setopt_long(e, CURLOPT_HTTP_CONTENT_DECODING, 0)
        ap_easy_setopt_long(e, CURLOPT_PATH_AS_IS, 1)
        ap_easy_setopt_long(e, CURLOPT_BUFFERSIZE, 64 * 1024)
        ap_easy_setopt_long(e, CURLOPT_TCP_KEEPALIVE, 1)
        // Record buffers stay with a TLS connection while it is pooled (≈ 34 KiB each, at most MAXCONNECTS of
        // them) instead of being freed after every request and allocated again for the next, which libcurl's
        // SSL_MODE_RELEASE_BUFFERS does (malloc, free and page faults in the intercepted path's profile).
        ap_easy_keep_tls_buffers(e)
        ap_easy_setopt_opensocket_cb(e, transferOpenSocketCallback)
        ap_easy_setopt_prereq_cb(e, transferPrereqCallback)
        ap_easy_setopt_ptr(e, CURLOPT_CLOSESOCKETDATA, Unmanaged.passUnretained(multi).toOpaque())
        ap_easy_setopt_closesocket_cb(e, CurlMulti.closeSocketCallback)
        ap_easy_setopt_header_cb(e, transferHeaderCallback)
        ap_easy_setopt_write_cb(e, transferWriteCallback)
        ap_easy_setopt_read_cb(e, transferReadCallback)
        ap_easy_setopt_seek_cb(e, transferSeekCallback)
    }
}

private func transferOpenSocketCallback(
    _ ud: UnsafeMutableRawPointer?, _ purpose: curlsocktype, _ address: UnsafeMutablePointer<curl_sockaddr>?
) -> curl_socket_t {
    guard let ud, let address else { return CURL_SOCKET_BAD }
    return Unmanaged<CurlTransfer>.fromOpaque(ud).takeUnretainedValue().openSocket(address)
}

/// `CURLOPT_PREREQFUNCTION`: the connection is chosen (new or from the pool) and the request not yet sent.
private func transferPrereqCallback(
    _ ud: UnsafeMutableRawPointer?, _ primaryIP: UnsafeMutablePointer<CChar>?,
    _ localIP: UnsafeMutablePointer<CChar>?, _ primaryPort: Int32, _ localPort: Int32
) -> Int32 {
    guard let ud else { return Int32(CURL_PREREQFUNC_OK) }
    Unmanaged<CurlTransfer>.fromOpaque(ud).takeUnretainedValue().connectionReady()
    // Parsed, not compared as text: libcurl may write an address as `::ffff:1.2.3.4` where the socket says 1.2.3.4.
    guard let primaryIP, let localIP, let remote = IPAddress.parse(cString: primaryIP),
        let local = IPAddress.parse(cString: localIP)
    else { return Int32(CURL_PREREQFUNC_OK) }
    Unmanaged<CurlTransfer>.fromOpaque(ud).takeUnretainedValue().multi.discardIfStale(
        CurlMulti.ConnectionKey(local: local, localPort: Int(localPort), remote: remote, remotePort: Int(primaryPort)))
    return Int32(CURL_PREREQFUNC_OK)
}

private func transferSeekCallback(_ ud: UnsafeMutableRawPointer?, _ offset: curl_off_t, _ origin: Int32) -> Int32 {
    let t = Unmanaged<CurlTransfer>.fromOpaque(ud!).takeUnretainedValue()
    guard offset == 0, origin == SEEK_SET, t.rewind() else { return Int32(CURL_SEEKFUNC_CANTSEEK) }
    return Int32(CURL_SEEKFUNC_OK)
}

private func transferHeaderCallback(
    _ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ n: Int, _ ud: UnsafeMutableRawPointer?
) -> Int {
    Unmanaged<CurlTransfer>.fromOpaque(ud!).takeUnretainedValue()
        .header(UnsafeRawBufferPointer(start: data, count: size * n))
}

private func transferWriteCallback(
    _ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ n: Int, _ ud: UnsafeMutableRawPointer?
) -> Int {
    Unmanaged<CurlTransfer>.fromOpaque(ud!).takeUnretainedValue()
        .body(UnsafeRawBufferPointer(start: data, count: size * n))
}

private func transferReadCallback(
    _ data: UnsafeMutablePointer<CChar>?, _ size: Int, _ n: Int, _ ud: UnsafeMutableRawPointer?
) -> Int {
    Unmanaged<CurlTransfer>.fromOpaque(ud!).takeUnretainedValue()
        .read(UnsafeMutableRawBufferPointer(start: data, count: size * n))
}
