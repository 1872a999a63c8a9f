import CAuthProxyShims
import CCurl
import Dispatch

#if canImport(Glibc)
    import Glibc
#endif

/// Drives one libcurl multi handle with Dispatch sources and one timer, on its event loop's serial queue
/// (libcurl's multi-socket API, as FoundationNetworking's `MultiHandle` does).
///
/// Every libcurl entry point goes through this type so it can tell when it is inside a libcurl call:
/// removing or unpausing a handle from within a callback is deferred to the next turn of the queue.
/// Sockets libcurl asks to close are closed only after every Dispatch source on them was cancelled (see
/// `../shared/PITFALLS.md`: curl closes in the same call that asks to REMOVE, before the cancel handler ran).
///
/// Confined to `queue`; `@unchecked Sendable` only so C callbacks can recover it.
final class CurlMulti: @unchecked Sendable {
    let handle: UnsafeMutableRawPointer
    let queue: DispatchQueue
    private var timer: (any DispatchSourceTimer)!
    /// When the Dispatch timer will fire (uptime ns), `.max` when it is not armed.
    private var armedDeadline: UInt64 = .max
    /// A zero timeout is already queued.
    private var immediatePending = false
    private var watches: [curl_socket_t: SocketWatch] = [:]
    /// Sockets libcurl opened through ``openSocketCallback`` (and so will close through ``closeSocketCallback``).
    private var opened: Set<curl_socket_t> = []
    /// Sources per descriptor not yet through their cancel handler.
    private var liveSources: [curl_socket_t: Int] = [:]
    /// Descriptors libcurl asked us to close while sources on them were still live.
    private var closePending: Set<curl_socket_t> = []
    /// What runs once the last source on a descriptor is gone (a connect-only connection handed to its
    /// channel, see ``connectOnlyDone(_:result:)``).
    private var afterSourcesGone: [curl_socket_t: () -> Void] = [:]
    private var depth = 0
    /// Idle easy handles without server-trust settings, and pools of handles that carry some (each reused only
    /// for the same settings; see ``CurlEasyHandle`` for the reuse rule).
    private var idlePlain: [CurlEasyHandle] = []
    private var idleTrusted: [(trust: ServerTrustSettings, handles: [CurlEasyHandle])] = []
    private var idleCount = 0
    /// Every handle made and not cleaned up, idle or in the multi handle: libcurl's private pointer to each is
    /// unretained, so this keeps them alive (entered once per handle, not per request).
    private var handles: [ObjectIdentifier: CurlEasyHandle] = [:]
    private var tornDown = false
    /// The multi handle of one client connection (``OwnUpstreams``): its connections may carry another request
    /// after a HEAD, 204 or 304 answer (an NTLM login lives on them; late bytes could only reach that client).
    var ownedByOneClient = false

    /// Pooled connections by address, and back: a connection is entered the first time a transfer on it ends
    /// (so before its first reuse), and removed when libcurl closes it.
    private var pooled: [ConnectionKey: curl_socket_t] = [:]
    private var pooledKeys: [curl_socket_t: ConnectionKey] = [:]
    /// Connections found holding unread bytes before reuse (for tests and logs).
    private(set) var staleDiscarded = 0

    /// Both ends of a TCP connection, as libcurl names them to the pre-request callback.
    struct ConnectionKey: Hashable {
        var local: IPAddress
        var localPort: Int
        var remote: IPAddress
        var remotePort: Int
    }

    /// Handles kept for reuse, over all pools (the connection cache is the multi's, not theirs).
    static let maxIdleEasyHandles = 256

    init(queue: DispatchQueue) {
        self.queue = queue
        guard let m = curl_multi_init() else { fatalError("curl_multi_init failed") }
        handle = m
        let me = Unmanaged.passUnretained(self).toOpaque()
        ap_multi_setopt_ptr(m, CURLMOPT_SOCKETDATA, me)
        ap_multi_setopt_ptr(m, CURLMOPT_TIMERDATA, me)
        ap_multi_setopt_socket_cb(m, curlSocketCallback)
        ap_multi_setopt_timer_cb(m, curlTimerCallback)
        ap_multi_setopt_long(m, CURLMOPT_MAXCONNECTS, 512)
        let t = DispatchSource.makeTimerSource(queue: queue)
        t.setEventHandler { [unowned self] in self.timerFired() }
        t.schedule(deadline: .distantFuture)
        t.resume()
        timer = t
    }

    /// Whether a libcurl call is on the stack right now.
    var insideCurl: Bool { depth > 0 }

    /// Whether ``tearDown()`` ran: every handle is cleaned up, nothing may be called on one any more.
    var isTornDown: Bool { tornDown }

    // MARK: easy handles

    /// An idle handle for a request with server-trust settings `trust`: one that already carries exactly these,
    /// else one that carries none (the caller applies them), else a new one.
    func makeEasyHandle(trust: ServerTrustSettings) -> CurlEasyHandle {
        assertOnQueue(queue)
        if let i = idleTrusted.firstIndex(where: { $0.trust == trust }), let h = idleTrusted[i].handles.popLast() {
            idleCount -= 1
            return h
        }
        return makeEasyHandle()
    }

    /// An idle handle without server-trust settings, or a new one.
    func makeEasyHandle() -> CurlEasyHandle {
        assertOnQueue(queue)
        if let h = idlePlain.popLast() {
            idleCount -= 1
            return h
        }
        let h = CurlEasyHandle(multi: self)
        handles[ObjectIdentifier(h)] = h
        return h
    }

    /// A new `CONNECT_ONLY` handle (``CurlEasyHandle/makeConnectOnly()``), never from or back to the pools.
    func makeConnectOnlyHandle() -> CurlEasyHandle? {
        assertOnQueue(queue)
        let h = CurlEasyHandle(multi: self)
        guard h.makeConnectOnly() else {
            h.cleanup()
            return nil
        }
        handles[ObjectIdentifier(h)] = h
        return h
    }

    /// Adds a `CONNECT_ONLY` handle for `connector`, which ``CurlConnector/finished(_:on:)`` is called on. On
    /// success the handle stays in the multi handle (removing it closes its connection) until
    /// ``releaseConnectOnly(_:)``.
    /// False when libcurl refused the handle (then it is released and nothing is called).
    func addConnectOnly(_ easy: CurlEasyHandle, connector: CurlConnector) -> Bool {
        assertOnQueue(queue)
        easy.owner = ObjectIdentifier(connector)
        easy.connector = Unmanaged.passUnretained(connector)
        depth += 1
        let rc = curl_multi_add_handle(handle, easy.raw)
        depth -= 1
        guard rc == CURLM_OK else {
            easy.connector = nil
            handles.removeValue(forKey: ObjectIdentifier(easy))
            easy.owner = nil
            easy.cleanup()
            return false
        }
        return true
    }

    /// Closes the connection of a `CONNECT_ONLY` handle (libcurl closes its socket through our close callback,
    /// once no Dispatch source watches it) and frees the handle. Deferred when inside libcurl.
    func releaseConnectOnly(_ easy: CurlEasyHandle) {
        assertOnQueue(queue)
        if insideCurl {
            nonisolated(unsafe) let easy = easy
            queue.async { [self] in releaseConnectOnly(easy) }
            return
        }
        // After a teardown the handle is already cleaned up.
        guard !tornDown, handles.removeValue(forKey: ObjectIdentifier(easy)) != nil else { return }
        easy.owner = nil
        easy.connector = nil
        depth += 1
        curl_multi_remove_handle(handle, easy.raw)
        depth -= 1
        easy.cleanup()
    }

    /// Takes back a handle that left the multi handle. A handle that carried a credential is reset first, so
    /// nothing of it reaches the next request (``CurlEasyHandle``'s reuse rule).
    private func recycle(_ h: CurlEasyHandle) {
        guard idleCount < Self.maxIdleEasyHandles, !tornDown else {
            handles.removeValue(forKey: ObjectIdentifier(h))
            h.cleanup()
            return
        }
        if h.carriesCredential { h.reset(multi: self) }
        idleCount += 1
        guard h.hasTrust, let trust = h.trust else {
            idlePlain.append(h)
            return
        }
        if let i = idleTrusted.firstIndex(where: { $0.trust == trust }) {
            idleTrusted[i].handles.append(h)
        } else {
            idleTrusted.append((trust: trust, handles: [h]))
        }
    }

    /// Adds `easy` to the multi handle for `transfer`, which ``CurlTransfer/finished(_:)`` is called on.
    func add(_ easy: CurlEasyHandle, transfer: CurlTransfer) {
        assertOnQueue(queue)
        easy.owner = ObjectIdentifier(transfer)
        easy.transfer = Unmanaged.passUnretained(transfer)
        depth += 1
        curl_multi_add_handle(handle, easy.raw)
        depth -= 1
    }

    /// Removes a transfer before it finished (the client went away). Deferred when inside libcurl; `owner`
    /// (whose memory the handle's callbacks point into) is kept alive until then. A no-op when the handle no
    /// longer belongs to `owner` (it finished meanwhile and may run another transfer now).
    func cancel(_ easy: CurlEasyHandle, owner: AnyObject) {
        assertOnQueue(queue)
        if insideCurl {
            nonisolated(unsafe) let easy = easy
            nonisolated(unsafe) let owner = owner
            queue.async { [self] in withExtendedLifetime(owner) { cancel(easy, owner: owner) } }
            return
        }
        guard !tornDown, easy.owner == ObjectIdentifier(owner) else { return }
        easy.owner = nil
        easy.transfer = nil
        depth += 1
        curl_multi_remove_handle(handle, easy.raw)
        depth -= 1
        recycle(easy)
    }

    /// Resumes a paused transfer. Deferred when inside libcurl (libcurl forbids it from callbacks); a no-op
    /// when the handle no longer belongs to `owner`.
    func unpause(_ easy: CurlEasyHandle, owner: AnyObject) {
        assertOnQueue(queue)
        if insideCurl {
            nonisolated(unsafe) let easy = easy
            nonisolated(unsafe) let owner = owner
            queue.async { [self] in withExtendedLifetime(owner) { unpause(easy, owner: owner) } }
            return
        }
        guard !tornDown, easy.owner == ObjectIdentifier(owner) else { return }
        depth += 1
        curl_easy_pause(easy.raw, CURLPAUSE_CONT)
        depth -= 1
        drainMessages()
    }

    // MARK: driving

    func socketAction(_ fd: curl_socket_t, _ mask: Int32) {
        assertOnQueue(queue)
        guard !tornDown else { return }
        var running: Int32 = 0
        depth += 1
        curl_multi_socket_action(handle, fd, mask, &running)
        depth -= 1
        drainMessages()
    }

    private func drainMessages() {
        guard depth == 0 else { return }
        var left: Int32 = 0
        // A delegate told of a finished transfer may end its client connection, and with it a multi handle of
        // its own (``OwnUpstreams``), whose teardown is queued: never read messages from a torn-down handle.
        while !tornDown, let msg = curl_multi_info_read(handle, &left) {
            guard msg.pointee.msg == CURLMSG_DONE, let easy = msg.pointee.easy_handle else { continue }
            let result = msg.pointee.data.result
            var priv: UnsafeMutableRawPointer? = nil
            ap_easy_getinfo_ptr(easy, CURLINFO_PRIVATE, &priv)
            if let priv, case let h = Unmanaged<CurlEasyHandle>.fromOpaque(priv).takeUnretainedValue(), h.isConnectOnly
            {
                connectOnlyDone(h, result: result)
                continue
            }
            depth += 1
            curl_multi_remove_handle(handle, easy)
            depth -= 1
            guard let priv else { continue }  // every handle made here carries itself as private data
            let h = Unmanaged<CurlEasyHandle>.fromOpaque(priv).takeUnretainedValue()
            let transfer = h.transfer
            h.owner = nil
            h.transfer = nil
            // A transfer cancelled while inside libcurl has no transfer here any more, only the deferred removal.
            transfer?.takeUnretainedValue().finished(result, on: h)
            recycle(h)
        }
    }

    /// A `CONNECT_ONLY` handle is connected (or failed): it stays in the multi handle, holding its connection,
    /// for its connector; a failed one, or one whose connector was cancelled meanwhile, is released.
    private func connectOnlyDone(_ h: CurlEasyHandle, result: CURLcode) {
        guard result == CURLE_OK, h.connector != nil else {
            let connector = h.connector
            h.connector = nil
            connector?.takeUnretainedValue().finished(result, on: h)
            releaseConnectOnly(h)
            return
        }
        // The handle keeps its connector until the hand-over: a ``CurlConnector/cancel()`` meanwhile clears it and
        // releases the handle, and nothing is handed over.
        let handOver = {
            guard let connector = h.connector else { return }
            h.connector = nil
            connector.takeUnretainedValue().finished(result, on: h)
        }
        // The connection's socket is watched by the own client's channel from now on: the sources libcurl asked
        // for while connecting go (the close still waits for their cancel handlers), and it is no pooled
        // connection of libcurl's to peek at before reuse.
        var fd: curl_socket_t = -1
        guard ap_easy_getinfo_socket(h.raw, CURLINFO_ACTIVESOCKET, &fd) == CURLE_OK, fd >= 0 else {
            handOver()
            return
        }
        watches.removeValue(forKey: fd)?.cancel()
        if let key = pooledKeys.removeValue(forKey: fd) { pooled.removeValue(forKey: key) }
        // The channel's sources are made only once those are gone. A cancelled source leaves libdispatch's
        // epoll set when its cancellation is processed, later; a source made on the same descriptor meanwhile
        // shares its registration, and was seen to lose it (the descriptor left epoll with the new source still
        // waiting on it: an exchange hung until its timeout, in 6 of about 22 runs of
        // test_host_without_certificate_credential_gets_none once the loops ran on threads of their own).
        if (liveSources[fd] ?? 0) > 0 {
            afterSourcesGone[fd] = handOver
        } else {
            handOver()
        }
    }

    /// Cancels the timer and every source, then cleans up the multi handle (which re-enters the socket and
    /// close callbacks). Must run on `queue` before the last reference goes away.
    func tearDown() {
        assertOnQueue(queue)
        guard !tornDown else { return }
        precondition(!insideCurl, "CurlMulti.tearDown from inside a libcurl call")
        tornDown = true
        timer.cancel()
        for (_, w) in watches { w.cancel() }
        watches.removeAll()
        // Handles still in the multi handle (a transfer whose removal was deferred): out, and cleaned up.
        for h in handles.values where h.owner != nil {
            h.owner = nil
            h.transfer = nil
            curl_multi_remove_handle(handle, h.raw)
            h.cleanup()
        }
        for h in idlePlain { h.cleanup() }
        for pool in idleTrusted { for h in pool.handles { h.cleanup() } }
        handles.removeAll()
        idlePlain.removeAll()
        idleTrusted.removeAll()
        idleCount = 0
        curl_multi_cleanup(handle)
    }

    // MARK: callbacks from libcurl

    fileprivate func socketCallback(_ fd: curl_socket_t, _ what: Int32) {
        if what == CURL_POLL_REMOVE {
            // A socket we opened is closed through our close callback, so its sources can stay (suspended)
            // for the next transfer on the same kept-alive connection instead of being rebuilt per request.
            if opened.contains(fd) {
                watches[fd]?.want(read: false, write: false)
                if pooledKeys[fd] == nil, let key = Self.connectionKey(fd) {
                    pooled[key] = fd
                    pooledKeys[fd] = key
                }
            } else {
                watches.removeValue(forKey: fd)?.cancel()
            }
            return
        }
        let watch: SocketWatch
        if let w = watches[fd] {
            watch = w
        } else {
            watch = SocketWatch(fd: fd, multi: self, owned: opened.contains(fd))
            watches[fd] = watch
        }
        watch.want(
            read: what == CURL_POLL_IN || what == CURL_POLL_INOUT,
            write: what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
    }

    /// libcurl asks for a timeout on every socket action; re-arming a Dispatch timer each time costs a
    /// wake-up of libdispatch's manager thread. So the timer is only moved earlier, never later: firing early
    /// is harmless (libcurl finds nothing due and asks again), and "no timeout" (-1) just leaves it armed.
    fileprivate func timerCallback(_ ms: Int) {
        if ms < 0 { return }
        if ms == 0 {
            guard !immediatePending else { return }
            immediatePending = true
            queue.async { [self] in
                immediatePending = false
                socketAction(CURL_SOCKET_TIMEOUT, 0)
            }
            return
        }
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(ms) * 1_000_000
        if deadline < armedDeadline {
            armedDeadline = deadline
            timer.schedule(deadline: DispatchTime(uptimeNanoseconds: deadline), leeway: .milliseconds(1))
        }
    }

    private func timerFired() {
        armedDeadline = .max
        guard !tornDown else { return }
        socketAction(CURL_SOCKET_TIMEOUT, 0)
        guard !tornDown else { return }
        // libcurl does not repeat a timeout it already reported (and we may have skipped it because an
        // earlier one was armed): ask for the next one explicitly.
        var ms = -1
        curl_multi_timeout(handle, &ms)
        if ms >= 0 { timerCallback(ms) }
    }

    /// Called before a request is sent on the connection `key`. A connection back from the pool must be exactly
    /// as the last response left it: bytes waiting on it (a late body after a HEAD or 204 answer, anything after
    /// a complete response) would be read as the next client's response, and every later response on it would
    /// be shifted by one, across clients. libcurl's own liveness check counts readable data as alive, so the
    /// socket is peeked here; a stale one is shut down, which makes libcurl's send or read fail at once and
    /// retry the request on a fresh connection.
    func discardIfStale(_ key: ConnectionKey) {
        assertOnQueue(queue)
        guard let fd = pooled[key] else { return }  // a new connection
        var byte: UInt8 = 0
        let n = recv(fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
        if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) { return }
        staleDiscarded += 1
        Glibc.shutdown(fd, Int32(SHUT_RDWR))
        pooled.removeValue(forKey: key)
        pooledKeys.removeValue(forKey: fd)
    }

    private static func connectionKey(_ fd: curl_socket_t) -> ConnectionKey? {
        var local = sockaddr_storage()
        var remote = sockaddr_storage()
        var llen = socklen_t(MemoryLayout<sockaddr_storage>.size)
        var rlen = llen
        let ok = withUnsafeMutablePointer(to: &local) { l in
            withUnsafeMutablePointer(to: &remote) { r in
                l.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &llen) } == 0
                    && r.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &rlen) } == 0
            }
        }
        guard ok, let lip = IPAddress(local), let rip = IPAddress(remote) else { return nil }
        return ConnectionKey(local: lip, localPort: port(local), remote: rip, remotePort: port(remote))
    }

    private static func port(_ s: sockaddr_storage) -> Int {
        var s = s
        let family = Int32(s.ss_family)
        return withUnsafePointer(to: &s) { p in
            if family == AF_INET6 {
                return Int(
                    p.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin6_port) })
            }
            return Int(
                p.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin_port) })
        }
    }

    /// libcurl wants `fd` closed: now, or when the last source on it has been cancelled.
    fileprivate func closeSocket(_ fd: curl_socket_t) {
        opened.remove(fd)
        if let key = pooledKeys.removeValue(forKey: fd) { pooled.removeValue(forKey: key) }
        if let w = watches.removeValue(forKey: fd) { w.cancel() }
        if (liveSources[fd] ?? 0) > 0 {
            closePending.insert(fd)
        } else {
            Glibc.close(fd)
        }
    }

    /// A Dispatch source on `fd` (one of the multi's own, or a ``CurlLink``'s channel): `fd` is closed only
    /// after every such source is gone.
    func sourceCreated(_ fd: curl_socket_t) {
        liveSources[fd, default: 0] += 1
    }

    func sourceCancelled(_ fd: curl_socket_t) {
        let n = (liveSources[fd] ?? 1) - 1
        if n > 0 {
            liveSources[fd] = n
            return
        }
        liveSources.removeValue(forKey: fd)
        if closePending.remove(fd) != nil { Glibc.close(fd) }
        afterSourcesGone.removeValue(forKey: fd)?()
    }

    /// A socket libcurl opened through a transfer's open callback (and so will close through ours).
    func socketOpened(_ fd: curl_socket_t) { opened.insert(fd) }

    /// The close callback installed on every easy handle (`CURLOPT_CLOSESOCKETFUNCTION`).
    static let closeSocketCallback: @convention(c) (UnsafeMutableRawPointer?, curl_socket_t) -> Int32 = { clientp, fd in
        guard let clientp else { return Glibc.close(fd) }
        Unmanaged<CurlMulti>.fromOpaque(clientp).takeUnretainedValue().closeSocket(fd)
        return 0
    }
}

/// The Dispatch sources libcurl asked for on one socket.
private final class SocketWatch {
    let fd: curl_socket_t
    /// The descriptor the Dispatch sources watch: `fd` itself for sockets we opened (and so close ourselves,
    /// after the sources are cancelled), a `dup` for the others (libcurl's resolver socketpair is closed
    /// directly by libcurl, right after REMOVE: watching a private duplicate keeps a reused descriptor number
    /// from ever meeting a stale registration).
    let sourceFD: Int32
    private let owned: Bool
    /// Strong: a cancel handler may run after `tearDown` dropped the last other reference to the multi
    /// handle (the cycle multi → watches → watch → multi is broken when the watch is removed).
    let multi: CurlMulti
    private var read: (any DispatchSourceRead)?
    private var write: (any DispatchSourceWrite)?
    /// Whether each source is resumed.
    private var readOn = false
    private var writeOn = false
    /// Whether libcurl currently wants read events.
    private var wantRead = false
    private var liveDupSources = 0

    init(fd: curl_socket_t, multi: CurlMulti, owned: Bool) {
        self.fd = fd
        self.multi = multi
        let d = owned ? -1 : dup(fd)
        self.owned = owned || d < 0
        sourceFD = owned || d < 0 ? fd : d
    }

    private func sourceCreated() {
        if owned { multi.sourceCreated(fd) } else { liveDupSources += 1 }
    }

    /// A cancel handler ran.
    private func sourceGone() {
        if owned {
            multi.sourceCancelled(fd)
        } else {
            liveDupSources -= 1
            if liveDupSources == 0 { Glibc.close(sourceFD) }
        }
    }

    /// Read interest is dropped lazily: the source stays armed and is suspended only if an event arrives
    /// that libcurl did not ask for. A kept-alive upstream connection is quiet between requests, so this saves
    /// a suspend/resume pair (and a wake-up of libdispatch's manager thread) per request. Write sources fire
    /// whenever the socket has room, so write interest is dropped at once.
    func want(read wantRead: Bool, write wantWrite: Bool) {
        self.wantRead = wantRead
        if wantRead {
            if read == nil {
                let s = DispatchSource.makeReadSource(fileDescriptor: sourceFD, queue: multi.queue)
                let fd = fd
                let multi = multi
                s.setEventHandler { [unowned self] in
                    if self.wantRead {
                        multi.socketAction(fd, CURL_CSELECT_IN)
                    } else if self.readOn {
                        self.readOn = false
                        self.read?.suspend()
                    }
                }
                s.setCancelHandler { [self] in self.sourceGone() }
                sourceCreated()
                read = s
            }
            if !readOn { readOn = true; read!.resume() }
        }
        if wantWrite {
            if write == nil {
                let s = DispatchSource.makeWriteSource(fileDescriptor: sourceFD, queue: multi.queue)
                let fd = fd
                let multi = multi
                s.setEventHandler { multi.socketAction(fd, CURL_CSELECT_OUT) }
                s.setCancelHandler { [self] in self.sourceGone() }
                sourceCreated()
                write = s
            }
            if !writeOn { writeOn = true; write!.resume() }
        } else if writeOn {
            writeOn = false
            write!.suspend()
        }
    }

    func cancel() {
        if !owned, read == nil, write == nil, sourceFD >= 0 { Glibc.close(sourceFD) }
        if let r = read {
            r.cancel()
            if !readOn { r.resume() }
        }
        if let w = write {
            w.cancel()
            if !writeOn { w.resume() }
        }
        read = nil
        write = nil
    }
}

private func curlSocketCallback(
    _ easy: UnsafeMutableRawPointer?, _ fd: curl_socket_t, _ what: Int32, _ userp: UnsafeMutableRawPointer?,
    _ socketp: UnsafeMutableRawPointer?
) -> Int32 {
    Unmanaged<CurlMulti>.fromOpaque(userp!).takeUnretainedValue().socketCallback(fd, what)
    return 0
}

private func curlTimerCallback(_ multi: UnsafeMutableRawPointer?, _ ms: Int, _ userp: UnsafeMutableRawPointer?) -> Int32
{
    Unmanaged<CurlMulti>.fromOpaque(userp!).takeUnretainedValue().timerCallback(ms)
    return 0
}
