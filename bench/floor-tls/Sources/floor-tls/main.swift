// floor-tls: the cheapest intercepting keep-alive HTTPS relay we can build on Dispatch sources and OpenSSL.
//
//   floor-tls LISTEN_PORT ORIGIN_PORT CERT_PEM KEY_PEM ORIGIN_CA_PEM TOKEN      (everything on 127.0.0.1)
//
// The TLS counterpart of bench/floor, for bench/https.sh: whatever authproxy spends per intercepted request
// above this is its own work, not that of Dispatch + OpenSSL. Per client connection:
//   - read the plain `CONNECT host:port HTTP/1.1` head, answer `200 Connection Established`, then do the
//     TLS server handshake on that socket with CERT_PEM/KEY_PEM (one fixed certificate: no minting);
//   - open one upstream TCP + TLS connection to 127.0.0.1:ORIGIN_PORT (SNI and verified name `localhost`,
//     trust anchor ORIGIN_CA_PEM), kept alive for the life of the client connection;
//   - per request: find the end of the head (requests are assumed to have no body), append `token=TOKEN` to
//     the query of the request line (a byte edit into a preallocated buffer), send it upstream; frame each
//     response by its Content-Length (none: relay until the upstream closes) and relay it as is.
// Deliberately minimal, as bench/floor:
//   - one serial queue for everything; no async hops between a source handler and the work;
//   - one DispatchSourceRead per socket, kept armed; each wake-up calls SSL_read until SSL_ERROR_WANT_READ;
//   - write-through: SSL_write from the handler that read the bytes; a DispatchSourceWrite only when OpenSSL
//     says SSL_ERROR_WANT_WRITE, cancelled once its backlog is drained (the source reading the other side is
//     suspended meanwhile: back-pressure);
//   - OpenSSL directly on the sockets (SSL_set_fd), read-ahead on (one read(2) per wake-up, not one per
//     record header and body), TLS 1.2 and 1.3, otherwise OpenSSL's defaults (session cache and tickets
//     included, as authproxy and nginx have them);
//   - no libcurl, no header rewriting beyond the token, no allocations per request on the fast path.
import COpenSSL
import Dispatch
import FloorKit
import Glibc

let queue = DispatchQueue(label: "floor-tls")
let scratchSize = 64 * 1024
let scratch = UnsafeMutablePointer<UInt8>.allocate(capacity: scratchSize)  // used on `queue` only
let outSize = 80 * 1024  // request heads with the token added; a head is at most 64 KiB
let out = UnsafeMutablePointer<UInt8>.allocate(capacity: outSize)  // used on `queue` only
let maxHead = 64 * 1024

func failTLS(_ msg: String) -> Never {
    fputs("floor-tls: \(msg): \(openSSLError())\n", stderr)
    exit(1)
}

func openSSLError() -> String {
    var buf = [CChar](repeating: 0, count: 256)
    let e = ERR_get_error()
    if e == 0 { return "(no OpenSSL error)" }
    ERR_error_string_n(e, &buf, buf.count)
    return String(cString: buf)
}

/// The first few connection failures are logged (to the benchmark's log file); the rest only counted.
var failures = 0
func noteFailure(_ what: String, _ sslError: Int32) {
    failures += 1
    if failures <= 5 {
        let detail = sslError == SSL_ERROR_SYSCALL ? String(cString: strerror(errno)) : openSSLError()
        fputs("floor-tls: connection closed: \(what) (SSL error \(sslError): \(detail))\n", stderr)
    }
}

/// One socket and its TLS session: the read source, an optional write source and the plaintext waiting to be
/// written to it.
final class Side {
    let fd: Int32
    let ssl: OpaquePointer
    /// TLS usable for application data: the client after CONNECT (SSL_read does the server handshake),
    /// the upstream once SSL_do_handshake completed. Until then bytes for it wait in `backlog`.
    var ready = false
    var readSource: DispatchSourceRead?
    var readSuspended = false
    /// SSL_read or the handshake returned SSL_ERROR_WANT_WRITE: retry reading when the socket is writable.
    var readWantsWrite = false
    var writeSource: DispatchSourceWrite?
    var backlog: [UInt8] = []
    var backlogOffset = 0
    var liveSources = 0
    var freed = false

    init(fd: Int32, ssl: OpaquePointer) {
        self.fd = fd
        self.ssl = ssl
    }

    var hasBacklog: Bool { backlogOffset < backlog.count }

    /// Called from each source's cancel handler: the session is freed and the fd closed once no source
    /// watches it.
    func sourceGone() {
        liveSources -= 1
        if liveSources == 0 && !freed {
            freed = true
            SSL_free(ssl)
            close(fd)
        }
    }

    func suspendRead() {
        if let s = readSource, !readSuspended { s.suspend(); readSuspended = true }
    }

    func resumeRead() {
        if let s = readSource, readSuspended { readSuspended = false; s.resume() }
    }

    /// Keeps p[0..<n] to be written later.
    func keep(_ p: UnsafeMutablePointer<UInt8>, _ n: Int) {
        if !hasBacklog {
            backlog.removeAll(keepingCapacity: true)
            backlogOffset = 0
        }
        backlog.append(contentsOf: UnsafeBufferPointer(start: p, count: n))
    }
}

let connectPrefix = Array("CONNECT ".utf8)
let connectReply = Array("HTTP/1.1 200 Connection Established\r\n\r\n".utf8)
let badGateway = Array("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".utf8)

final class Relay {
    /// Plain until the CONNECT head is answered (`ready` false); then the TLS server side.
    let client: Side
    /// Opened once the CONNECT head is answered.
    var upstream: Side!
    var closed = false

    // Request side: bytes of an incomplete head (CONNECT, then requests).
    var reqBuf: [UInt8] = []
    // Response side: framing state.
    var respInHead = true
    var respHead: [UInt8] = []
    var bodyLeft = 0  // Int.max: no Content-Length, relay until the upstream closes

    init(client: Side) {
        self.client = client
        reqBuf.reserveCapacity(4096)
        respHead.reserveCapacity(4096)
    }

    /// One read source on the client socket for its whole life: the CONNECT head, then TLS.
    func start() {
        arm(read: client) { [unowned self] in self.clientReadable() }
    }

    private func connectReadable() {
        while !closed {
            let n = read(client.fd, scratch, scratchSize)
            if n > 0 {
                reqBuf.append(contentsOf: UnsafeBufferPointer(start: scratch, count: n))
                let end = reqBuf.withUnsafeBufferPointer { firstHeadEnd($0, from: 0) }
                if end < 0 {
                    if reqBuf.count > maxHead { shutdown() }
                    continue
                }
                // The client waits for our answer before its ClientHello: nothing may follow the head.
                guard end == reqBuf.count, reqBuf.starts(with: connectPrefix) else { shutdown(); return }
                reqBuf.removeAll(keepingCapacity: true)
                tunnelEstablished()
                return
            } else if n == 0 {
                shutdown(); return
            } else {
                if errno == EINTR { continue }
                if errno == EAGAIN || errno == EWOULDBLOCK { return }
                shutdown(); return
            }
        }
    }

    /// Opens the upstream connection, answers the CONNECT and switches the client socket to TLS: the next
    /// SSL_read on it does the server handshake.
    private func tunnelEstablished() {
        guard let up = openUpstream() else {
            _ = badGateway.withUnsafeBufferPointer { Glibc.send(client.fd, $0.baseAddress!, $0.count, Int32(MSG_NOSIGNAL)) }
            shutdown(); return
        }
        upstream = up
        arm(read: upstream) { [unowned self] in self.upstreamReadable() }
        let sent = connectReply.withUnsafeBufferPointer { Glibc.send(client.fd, $0.baseAddress!, $0.count, Int32(MSG_NOSIGNAL)) }
        guard sent == connectReply.count else { shutdown(); return }
        client.ready = true
    }

    private func arm(read side: Side, _ handler: @escaping () -> Void) {
        let s = DispatchSource.makeReadSource(fileDescriptor: side.fd, queue: queue)
        side.liveSources += 1
        s.setEventHandler(handler: handler)
        // The cancel handler keeps the relay alive until both sockets are closed.
        s.setCancelHandler { side.sourceGone(); _ = self }
        side.readSource = s
        s.resume()
    }

    func shutdown() {
        if closed { return }
        closed = true
        ERR_clear_error()  // the error queue is per thread: leave nothing for the next connection's SSL_get_error
        for side in upstream == nil ? [client] : [client, upstream!] {
            if let w = side.writeSource { w.cancel(); side.writeSource = nil }
            if let r = side.readSource {
                r.cancel()
                if side.readSuspended { side.readSuspended = false; r.resume() }
                side.readSource = nil
            }
        }
    }

    // MARK: reading

    /// SSL_read until WANT_READ; hands each chunk to `consume`. Stops early when `stop()` says so (the other
    /// side has a backlog); the source stays suspended until the backlog drains.
    private func drain(_ side: Side, consume: (Int) -> Void, stop: () -> Bool) {
        while !closed {
            let n = SSL_read(side.ssl, scratch, Int32(scratchSize))
            if n > 0 {
                consume(Int(n))
                if closed { return }
                if stop() { side.suspendRead(); return }
                continue
            }
            let err = SSL_get_error(side.ssl, n)
            if err == SSL_ERROR_WANT_READ { return }
            if err == SSL_ERROR_WANT_WRITE { waitWritableToRead(side); return }
            if err != SSL_ERROR_ZERO_RETURN && !(err == SSL_ERROR_SYSCALL && errno == 0) {
                noteFailure(side === client ? "client read" : "upstream read", err)
            }
            shutdown(); return
        }
    }

    private func waitWritableToRead(_ side: Side) {
        side.readWantsWrite = true
        side.suspendRead()
        ensureWriteSource(side)
    }

    func clientReadable() {
        if !client.ready { connectReadable(); return }
        drain(client, consume: clientBytes, stop: { self.upstream.hasBacklog })
    }

    func upstreamReadable() {
        if !upstream.ready {
            let r = SSL_do_handshake(upstream.ssl)
            if r != 1 {
                let err = SSL_get_error(upstream.ssl, r)
                if err == SSL_ERROR_WANT_READ { return }
                if err == SSL_ERROR_WANT_WRITE { waitWritableToRead(upstream); return }
                noteFailure("upstream handshake (verify: \(String(cString: X509_verify_cert_error_string(SSL_get_verify_result(upstream.ssl)))))", err)
                shutdown(); return
            }
            upstream.ready = true
            // Requests that came while the handshake ran.
            if upstream.hasBacklog { flush(upstream); if closed { return } }
        }
        drain(upstream, consume: upstreamBytes, stop: { self.client.hasBacklog })
    }

    /// Forwards every complete request head with the token added; keeps an incomplete one for the next read.
    private func clientBytes(_ n: Int) {
        if reqBuf.isEmpty {
            let used = forwardHeads(scratch, n)
            if used < n { reqBuf.append(contentsOf: UnsafeBufferPointer(start: scratch + used, count: n - used)) }
        } else {
            reqBuf.append(contentsOf: UnsafeBufferPointer(start: scratch, count: n))
            let used = reqBuf.withUnsafeMutableBufferPointer { forwardHeads($0.baseAddress!, $0.count) }
            reqBuf.removeFirst(used)
        }
        if reqBuf.count > maxHead { shutdown() }  // no head end in 64 KiB: give up
    }

    /// Sends the complete heads in p[0..<n] upstream, each with the token added; returns the bytes used.
    private func forwardHeads(_ p: UnsafeMutablePointer<UInt8>, _ n: Int) -> Int {
        let buf = UnsafeBufferPointer(start: p, count: n)
        var start = 0
        var outLen = 0
        while true {
            let end = firstHeadEnd(buf, from: start)
            if end < 0 { break }
            if outLen + (end - start) + tokenParamCount + 1 > outSize {
                send(to: upstream, out, outLen)
                if closed { return n }
                outLen = 0
            }
            outLen += addToken(p + start, end - start, out + outLen)
            start = end
        }
        if outLen > 0 { send(to: upstream, out, outLen) }
        return start
    }

    /// Tracks response framing (head, then Content-Length bytes of body) and relays the chunk as is.
    private func upstreamBytes(_ n: Int) {
        let buf = UnsafeBufferPointer(start: scratch, count: n)
        var i = 0
        while i < n {
            if respInHead {
                var end: Int
                var cl: Int?
                if respHead.isEmpty {
                    // Fast path: the head is within this chunk.
                    end = firstHeadEnd(buf, from: i)
                    if end < 0 {
                        respHead.append(contentsOf: UnsafeBufferPointer(rebasing: buf[i..<n]))
                        i = n
                        continue
                    }
                    cl = contentLength(UnsafeBufferPointer(rebasing: buf[i...]), end - i)
                } else {
                    let scanFrom = max(0, respHead.count - 3)
                    let before = respHead.count
                    respHead.append(contentsOf: UnsafeBufferPointer(rebasing: buf[i..<n]))
                    let e = respHead.withUnsafeBufferPointer { firstHeadEnd($0, from: scanFrom) }
                    if e < 0 {
                        if respHead.count > maxHead { shutdown(); return }
                        i = n
                        continue
                    }
                    cl = respHead.withUnsafeBufferPointer { contentLength($0, e) }
                    end = i + e - before
                    respHead.removeAll(keepingCapacity: true)
                }
                i = end
                bodyLeft = cl ?? Int.max
                respInHead = bodyLeft == 0
            } else {
                let take = min(bodyLeft, n - i)
                if bodyLeft != Int.max { bodyLeft -= take }
                i += take
                if bodyLeft == 0 { respInHead = true }
            }
        }
        send(to: client, scratch, n)
    }

    // MARK: writing

    /// Write-through; on WANT_WRITE keep the rest and create a write source for this socket.
    private func send(to side: Side, _ p: UnsafeMutablePointer<UInt8>, _ n: Int) {
        if side.hasBacklog || !side.ready {
            side.keep(p, n)
            return
        }
        var off = 0
        while off < n {
            let w = SSL_write(side.ssl, p + off, Int32(n - off))
            if w > 0 { off += Int(w); continue }
            let err = SSL_get_error(side.ssl, w)
            if err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ { break }
            noteFailure(side === client ? "client write" : "upstream write", err)
            shutdown(); return
        }
        if off == n { return }
        // OpenSSL wants the same bytes again (SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER: from another address).
        side.keep(p + off, n - off)
        ensureWriteSource(side)
    }

    /// Writes the backlog; once it is empty the reader feeding this socket resumes. False if it blocked.
    @discardableResult
    private func flush(_ side: Side) -> Bool {
        while side.hasBacklog {
            let w = side.backlog.withUnsafeMutableBufferPointer {
                SSL_write(side.ssl, $0.baseAddress! + side.backlogOffset, Int32($0.count - side.backlogOffset))
            }
            if w > 0 { side.backlogOffset += Int(w); continue }
            let err = SSL_get_error(side.ssl, w)
            if err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ { ensureWriteSource(side); return false }
            noteFailure(side === client ? "client write" : "upstream write", err)
            shutdown(); return false
        }
        side.backlog.removeAll(keepingCapacity: true)
        side.backlogOffset = 0
        (side === client ? upstream! : client).resumeRead()
        return true
    }

    private func ensureWriteSource(_ side: Side) {
        if side.writeSource != nil { return }
        let s = DispatchSource.makeWriteSource(fileDescriptor: side.fd, queue: queue)
        side.liveSources += 1
        s.setEventHandler { [unowned self] in self.writable(side) }
        s.setCancelHandler { side.sourceGone(); _ = self }
        side.writeSource = s
        s.resume()
    }

    private func writable(_ side: Side) {
        if closed { return }
        if side.readWantsWrite {
            side.readWantsWrite = false
            side.resumeRead()
            if side === client { clientReadable() } else { upstreamReadable() }
            if closed { return }
        }
        if side.hasBacklog && side.ready && !flush(side) { return }
        if side.hasBacklog || side.readWantsWrite { return }
        side.writeSource?.cancel()
        side.writeSource = nil
    }
}

/// Copies the request head src[0..<n] to dst with `token=TOKEN` appended to the query of its request line
/// (`?token=…`, or `&token=…` when there is a query already); returns the bytes written.
func addToken(_ src: UnsafeMutablePointer<UInt8>, _ n: Int, _ dst: UnsafeMutablePointer<UInt8>) -> Int {
    // The target is between the first and the second space of the first line.
    var i = 0
    while i < n && src[i] != 32 && src[i] != 13 { i += 1 }
    var j = i + 1
    var hasQuery = false
    while j < n && src[j] != 32 && src[j] != 13 { if src[j] == 63 { hasQuery = true }; j += 1 }
    guard i < n && src[i] == 32 && j < n && src[j] == 32 else {
        dst.update(from: src, count: n)  // not a request line we understand: as is
        return n
    }
    dst.update(from: src, count: j)
    dst[j] = hasQuery ? 38 : 63  // '&' : '?'
    (dst + j + 1).update(from: tokenParam, count: tokenParamCount)
    (dst + j + 1 + tokenParamCount).update(from: src + j, count: n - j)
    return n + 1 + tokenParamCount
}

// MARK: main

let args = CommandLine.arguments
guard args.count == 7, let listenPort = UInt16(args[1]), let originPort = UInt16(args[2]), !args[6].isEmpty else {
    fputs("usage: floor-tls LISTEN_PORT ORIGIN_PORT CERT_PEM KEY_PEM ORIGIN_CA_PEM TOKEN   (all on 127.0.0.1)\n", stderr)
    exit(2)
}
let (certPath, keyPath, originCAPath, token) = (args[3], args[4], args[5], args[6])
signal(SIGPIPE, SIG_IGN)
_ = OPENSSL_init_ssl(UInt64(OPENSSL_INIT_NO_ATEXIT), nil)

let tokenBytes = Array("token=\(token)".utf8)
let tokenParamCount = tokenBytes.count
let tokenParam = UnsafeMutablePointer<UInt8>.allocate(capacity: tokenParamCount)
tokenParam.initialize(from: tokenBytes, count: tokenParamCount)

let tlsModes = Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER)

/// The client-facing side: the origin's own certificate, which the benchmark's client trusts.
func makeServerCtx() -> OpaquePointer {
    guard let ctx = SSL_CTX_new(TLS_server_method()) else { failTLS("SSL_CTX_new") }
    _ = floor_ctx_set_min_proto(ctx, TLS1_2_VERSION)
    _ = floor_ctx_set_mode(ctx, tlsModes)
    _ = floor_ctx_set_read_ahead(ctx, 1)
    floor_ctx_ignore_unexpected_eof(ctx)
    if SSL_CTX_use_certificate_chain_file(ctx, certPath) != 1 { failTLS("cannot load \(certPath)") }
    if SSL_CTX_use_PrivateKey_file(ctx, keyPath, SSL_FILETYPE_PEM) != 1 { failTLS("cannot load \(keyPath)") }
    if SSL_CTX_check_private_key(ctx) != 1 { failTLS("\(keyPath) does not match \(certPath)") }
    return ctx
}

/// The upstream side: the origin verified against ORIGIN_CA_PEM as `localhost`.
func makeClientCtx() -> OpaquePointer {
    guard let ctx = SSL_CTX_new(TLS_client_method()) else { failTLS("SSL_CTX_new") }
    _ = floor_ctx_set_min_proto(ctx, TLS1_2_VERSION)
    _ = floor_ctx_set_mode(ctx, tlsModes)
    _ = floor_ctx_set_read_ahead(ctx, 1)
    floor_ctx_ignore_unexpected_eof(ctx)
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nil)
    if SSL_CTX_load_verify_locations(ctx, originCAPath, nil) != 1 { failTLS("cannot load \(originCAPath)") }
    return ctx
}

let serverCtx = makeServerCtx()
let clientCtx = makeClientCtx()

let listenFD = listenOnLoopback(listenPort)
let upstreamPort = originPort

/// Connects to the origin and starts the TLS client handshake (the ClientHello goes out here).
func openUpstream() -> Side? {
    guard let fd = connectToLoopback(upstreamPort) else { return nil }
    guard let ssl = SSL_new(clientCtx) else { close(fd); return nil }
    SSL_set_fd(ssl, fd)
    _ = floor_set_sni(ssl, "localhost")
    _ = SSL_set1_host(ssl, "localhost")
    SSL_set_connect_state(ssl)
    let r = SSL_do_handshake(ssl)
    if r != 1 && SSL_get_error(ssl, r) != SSL_ERROR_WANT_READ {
        noteFailure("upstream ClientHello", SSL_get_error(ssl, r))
        ERR_clear_error()
        SSL_free(ssl)
        close(fd)
        return nil
    }
    return Side(fd: fd, ssl: ssl)
}

let acceptSource = DispatchSource.makeReadSource(fileDescriptor: listenFD, queue: queue)
acceptSource.setEventHandler {
    while true {
        let fd = floor_accept_nonblock(listenFD)
        if fd < 0 {
            if errno == EINTR { continue }
            return  // EAGAIN, or out of fds: try again on the next wake-up
        }
        setNoDelay(fd)
        guard let ssl = SSL_new(serverCtx) else { close(fd); continue }
        SSL_set_fd(ssl, fd)
        SSL_set_accept_state(ssl)
        Relay(client: Side(fd: fd, ssl: ssl)).start()
    }
}
acceptSource.resume()
fputs("floor-tls: 127.0.0.1:\(listenPort) -> https://localhost:\(originPort) (127.0.0.1)\n", stderr)
dispatchMain()
