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
    private var watches: [curl_socket_t: SocketWatch] = [:]
    /// Sources per descriptor not yet through their cancel handler.
    private var liveSources: [curl_socket_t: Int] = [:]
    /// Descriptors libcurl asked us to close while sources on them were still live.
    private var closePending: Set<curl_socket_t> = []
    private var depth = 0
    private var idleEasyHandles: [UnsafeMutableRawPointer] = []
    private var tornDown = false
    /// Handles in the multi handle, and the object each one belongs to (so a deferred cancel never removes a
    /// handle that was meanwhile finished, recycled and handed to another transfer).
    private var active: [UnsafeMutableRawPointer: ObjectIdentifier] = [:]

    /// Handles kept for reuse (their buffers and settings are reset, the connection cache is the multi's).
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
        t.setEventHandler { [unowned self] in self.socketAction(CURL_SOCKET_TIMEOUT, 0) }
        t.schedule(deadline: .distantFuture)
        t.resume()
        timer = t
    }

    /// Whether a libcurl call is on the stack right now.
    var insideCurl: Bool { depth > 0 }

    // MARK: easy handles

    func makeEasyHandle() -> UnsafeMutableRawPointer {
        if let e = idleEasyHandles.popLast() { return e }
        guard let e = curl_easy_init() else { fatalError("curl_easy_init failed") }
        return e
    }

    private func recycle(_ easy: UnsafeMutableRawPointer) {
        if idleEasyHandles.count < Self.maxIdleEasyHandles {
            curl_easy_reset(easy)
            idleEasyHandles.append(easy)
        } else {
            curl_easy_cleanup(easy)
        }
    }

    func add(_ easy: UnsafeMutableRawPointer, owner: AnyObject) {
        active[easy] = ObjectIdentifier(owner)
        depth += 1
        curl_multi_add_handle(handle, easy)
        depth -= 1
    }

    /// Removes a transfer before it finished (the client went away). Deferred when inside libcurl; `owner`
    /// (whose memory the handle's callbacks and error buffer point into) is kept alive until then.
    func cancel(_ easy: UnsafeMutableRawPointer, owner: AnyObject) {
        if insideCurl {
            nonisolated(unsafe) let easy = easy
            nonisolated(unsafe) let owner = owner
            queue.async { [self] in withExtendedLifetime(owner) { cancel(easy, owner: owner) } }
            return
        }
        guard active[easy] == ObjectIdentifier(owner) else { return }
        active.removeValue(forKey: easy)
        depth += 1
        curl_multi_remove_handle(handle, easy)
        depth -= 1
        recycle(easy)
    }

    /// Resumes a paused transfer. Deferred when inside libcurl (libcurl forbids it from callbacks); a no-op
    /// when the handle no longer belongs to `owner`.
    func unpause(_ easy: UnsafeMutableRawPointer, owner: AnyObject) {
        if insideCurl {
            nonisolated(unsafe) let easy = easy
            nonisolated(unsafe) let owner = owner
            queue.async { [self] in withExtendedLifetime(owner) { unpause(easy, owner: owner) } }
            return
        }
        guard active[easy] == ObjectIdentifier(owner) else { return }
        depth += 1
        curl_easy_pause(easy, CURLPAUSE_CONT)
        depth -= 1
        drainMessages()
    }

    // MARK: driving

    func socketAction(_ fd: curl_socket_t, _ mask: Int32) {
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
        while let msg = curl_multi_info_read(handle, &left) {
            guard msg.pointee.msg == CURLMSG_DONE, let easy = msg.pointee.easy_handle else { continue }
            active.removeValue(forKey: easy)
            let result = msg.pointee.data.result
            var priv: UnsafeMutableRawPointer? = nil
            ap_easy_getinfo_ptr(easy, CURLINFO_PRIVATE, &priv)
            depth += 1
            curl_multi_remove_handle(handle, easy)
            depth -= 1
            if let priv {
                let transfer = Unmanaged<UpstreamTransfer>.fromOpaque(priv).takeUnretainedValue()
                transfer.finished(result)
            }
            recycle(easy)
        }
    }

    /// Cancels the timer and every source, then cleans up the multi handle (which re-enters the socket and
    /// close callbacks). Must run on `queue` before the last reference goes away.
    func tearDown() {
        guard !tornDown else { return }
        tornDown = true
        timer.cancel()
        for (_, w) in watches { w.cancel() }
        watches.removeAll()
        for e in idleEasyHandles { curl_easy_cleanup(e) }
        idleEasyHandles.removeAll()
        curl_multi_cleanup(handle)
    }

    // MARK: callbacks from libcurl

    fileprivate func socketCallback(_ fd: curl_socket_t, _ what: Int32) {
        if what == CURL_POLL_REMOVE {
            watches.removeValue(forKey: fd)?.cancel()
            return
        }
        let watch: SocketWatch
        if let w = watches[fd] {
            watch = w
        } else {
            watch = SocketWatch(fd: fd, multi: self)
            watches[fd] = watch
        }
        watch.want(read: what == CURL_POLL_IN || what == CURL_POLL_INOUT, write: what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
    }

    fileprivate func timerCallback(_ ms: Int) {
        if ms < 0 {
            timer.schedule(deadline: .distantFuture)
        } else if ms == 0 {
            queue.async { [self] in socketAction(CURL_SOCKET_TIMEOUT, 0) }
        } else {
            timer.schedule(deadline: .now() + .milliseconds(ms))
        }
    }

    /// libcurl wants `fd` closed: now, or when the last source on it has been cancelled.
    fileprivate func closeSocket(_ fd: curl_socket_t) {
        if let w = watches.removeValue(forKey: fd) { w.cancel() }
        if (liveSources[fd] ?? 0) > 0 {
            closePending.insert(fd)
        } else {
            Glibc.close(fd)
        }
    }

    fileprivate func sourceCreated(_ fd: curl_socket_t) {
        liveSources[fd, default: 0] += 1
    }

    fileprivate func sourceCancelled(_ fd: curl_socket_t) {
        let n = (liveSources[fd] ?? 1) - 1
        if n > 0 {
            liveSources[fd] = n
            return
        }
        liveSources.removeValue(forKey: fd)
        if closePending.remove(fd) != nil { Glibc.close(fd) }
    }

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
    unowned let multi: CurlMulti
    private var read: (any DispatchSourceRead)?
    private var write: (any DispatchSourceWrite)?
    private var readOn = false
    private var writeOn = false

    init(fd: curl_socket_t, multi: CurlMulti) {
        self.fd = fd
        self.multi = multi
    }

    func want(read wantRead: Bool, write wantWrite: Bool) {
        if wantRead {
            if read == nil {
                let s = DispatchSource.makeReadSource(fileDescriptor: fd, queue: multi.queue)
                let fd = fd
                let multi = multi
                s.setEventHandler { multi.socketAction(fd, CURL_CSELECT_IN) }
                s.setCancelHandler { multi.sourceCancelled(fd) }
                multi.sourceCreated(fd)
                read = s
            }
            if !readOn { readOn = true; read!.resume() }
        } else if readOn {
            readOn = false
            read!.suspend()
        }
        if wantWrite {
            if write == nil {
                let s = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: multi.queue)
                let fd = fd
                let multi = multi
                s.setEventHandler { multi.socketAction(fd, CURL_CSELECT_OUT) }
                s.setCancelHandler { multi.sourceCancelled(fd) }
                multi.sourceCreated(fd)
                write = s
            }
            if !writeOn { writeOn = true; write!.resume() }
        } else if writeOn {
            writeOn = false
            write!.suspend()
        }
    }

    func cancel() {
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

private func curlTimerCallback(_ multi: UnsafeMutableRawPointer?, _ ms: Int, _ userp: UnsafeMutableRawPointer?) -> Int32 {
    Unmanaged<CurlMulti>.fromOpaque(userp!).takeUnretainedValue().timerCallback(ms)
    return 0
}
