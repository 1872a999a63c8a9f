import CAuthProxyShims
import COpenSSL
import Dispatch

#if canImport(Glibc)
    import Glibc
#endif

/// One connection to Redis: a non-blocking socket (TLS through OpenSSL for `rediss://`) driven by `poll` with a
/// deadline per operation, and hiredis's formatter and reader for the protocol (``RESPCodec``).
///
/// Each call blocks its caller for at most `timeoutMillis` (a connect, `AUTH` and `SELECT` together get one such
/// limit each): the callers are the token service's queue and the subscriber's own thread, never an event loop.
/// Name resolution is `getaddrinfo` and may take longer when DNS is slow; an IP address or `/etc/hosts` name
/// avoids it.
///
/// Ownership: used by one queue (or thread) at a time.
final class RedisConnection {
    let endpoint: RedisEndpoint
    let timeoutMillis: Int
    private var fd: Int32 = -1
    private var ssl: OpaquePointer?
    private var ctx: OpaquePointer?
    private var codec = RESPCodec()
    private var buffer = [UInt8](repeating: 0, count: 16 * 1024)

    init(endpoint: RedisEndpoint, timeoutMillis: Int) {
        self.endpoint = endpoint
        self.timeoutMillis = timeoutMillis
    }

    deinit { close() }

    var isOpen: Bool { fd >= 0 }

    /// Connects (TLS handshake included), authenticates and selects the database.
    func open() throws(RedisError) {
        close()
        let deadline = Self.deadline(after: timeoutMillis)
        let addresses: [(family: Int32, addr: sockaddr_storage, len: socklen_t)]
        switch resolve(host: endpoint.host, port: endpoint.port) {
        case .success(let a): addresses = a
        case .failure(let why): throw RedisError(.unreachable, "cannot resolve \(endpoint.host): \(why)")
        case .outOfDescriptors(let e):
            throw RedisError(.unreachable, "cannot resolve \(endpoint.host): \(String(cString: strerror(e)))")
        }
        var last = RedisError(.unreachable, "cannot connect to \(endpoint.authority)")
        for a in addresses {
            switch startConnect(to: a, keepAlive: true) {
            case .failed(let e), .outOfDescriptors(let e):
                last = Self.connectError(e, endpoint)
                continue
            case .connecting(let s):
                fd = s
            }
            do throws(RedisError) {
                try wait(for: Int16(POLLOUT), until: deadline, doing: "connecting")
                var soError: Int32 = 0
                var len = socklen_t(MemoryLayout<Int32>.size)
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &soError, &len)
                if soError != 0 { throw Self.connectError(soError, endpoint) }
                break
            } catch {
                last = error
                close()
            }
        }
        guard fd >= 0 else { throw last }
        do throws(RedisError) {
            if let tls = endpoint.tls { try handshake(tls, until: deadline) }
            if let password = endpoint.password {
                var args = ["AUTH"]
                if let user = endpoint.user { args.append(user) }
                args.append(password)
                _ = try command(args.map { Array($0.utf8) }, name: "AUTH")
            }
            if endpoint.database != 0 { _ = try command(["SELECT", String(endpoint.database)], name: "SELECT") }
        } catch {
            close()
            throw error
        }
    }

    func close() {
        if let ssl { SSL_free(ssl) }
        ssl = nil
        if let ctx { SSL_CTX_free(ctx) }
        ctx = nil
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
        codec = RESPCodec()
    }

    /// Sends one command and reads its reply; an error reply is thrown (``RedisError/reply(_:command:)``). Any
    /// failure closes the connection (a reply may be half read).
    @discardableResult
    func command(_ args: [[UInt8]], name: String? = nil) throws(RedisError) -> RedisReply {
        let what = name ?? String(decoding: args.first ?? [], as: UTF8.self).uppercased()
        guard fd >= 0 else { throw RedisError(.unreachable, "not connected") }
        let deadline = Self.deadline(after: timeoutMillis)
        do throws(RedisError) {
            try send(args, until: deadline)
            guard let reply = try receive(until: deadline) else {
                throw RedisError(
                    .timeout, "Redis did not answer \(what) within \(timeoutMillis) ms ([cluster] timeout_ms)")
            }
            if case .error(let text) = reply { throw RedisError.reply(text, command: what) }
            return reply
        } catch {
            // An error reply leaves the connection in step; anything else does not.
            if error.kind == .timeout || error.kind == .unreachable || error.kind == .protocolError
                || error.kind == .tls
            {
                close()
            }
            throw error
        }
    }

    @discardableResult
    func command(_ args: [String], name: String? = nil) throws(RedisError) -> RedisReply {
        try command(args.map { Array($0.utf8) }, name: name)
    }

    /// Writes one command without waiting for its reply (the subscriber's SUBSCRIBE).
    func send(_ args: [[UInt8]], until deadline: UInt64) throws(RedisError) {
        let bytes = RESPCodec.format(args)
        var off = 0
        while off < bytes.count {
            let n = bytes.withUnsafeBytes { b in rawWrite(b.baseAddress! + off, b.count - off) }
            if n > 0 {
                off += n
                continue
            }
            try retry(n, until: deadline, doing: "sending")
        }
    }

    /// The next reply, waiting until `deadline`; nil when none came by then (the connection stays usable only
    /// when nothing of a reply had arrived: the subscriber's idle wait).
    func receive(until deadline: UInt64) throws(RedisError) -> RedisReply? {
        while true {
            if let r = try codec.next() { return r }
            let n = buffer.withUnsafeMutableBytes { rawRead($0.baseAddress!, $0.count) }
            if n > 0 {
                try codec.feed(Array(buffer[0..<n]))
                continue
            }
            if n == 0 {
                close()
                throw RedisError(.unreachable, "Redis closed the connection")
            }
            do throws(RedisError) {
                try retry(n, until: deadline, doing: "waiting for a reply")
            } catch  where error.kind == .timeout {
                return nil
            }
        }
    }

    // MARK: - I/O

    /// Bytes written, or -1 (EAGAIN, or TLS wants to read: `lastWant` says which), or -2 on a hard error.
    private var lastWant: Int16 = 0
    private var lastFailure: RedisError?

    private func rawWrite(_ p: UnsafeRawPointer, _ n: Int) -> Int {
        if let ssl {
            let r = SSL_write(ssl, p, Int32(n))
            return r > 0 ? Int(r) : tlsRetry(r)
        }
        let r = Glibc.send(fd, p, n, Int32(Glibc.MSG_NOSIGNAL))
        if r >= 0 { return r }
        if errno == EAGAIN || errno == EINTR {
            lastWant = Int16(POLLOUT)
            return -1
        }
        lastFailure = RedisError(.unreachable, "Redis connection failed: \(String(cString: strerror(errno)))")
        return -2
    }

    private func rawRead(_ p: UnsafeMutableRawPointer, _ n: Int) -> Int {
        if let ssl {
            let r = SSL_read(ssl, p, Int32(n))
            if r > 0 { return Int(r) }
            if SSL_get_error(ssl, r) == SSL_ERROR_ZERO_RETURN { return 0 }
            return tlsRetry(r)
        }
        let r = Glibc.recv(fd, p, n, 0)
        if r >= 0 { return r }
        if errno == EAGAIN || errno == EINTR {
            lastWant = Int16(POLLIN)
            return -1
        }
        lastFailure = RedisError(.unreachable, "Redis connection failed: \(String(cString: strerror(errno)))")
        return -2
    }

    private func tlsRetry(_ r: Int32) -> Int {
        guard let ssl else { return -2 }
        switch SSL_get_error(ssl, r) {
        case SSL_ERROR_WANT_READ:
            lastWant = Int16(POLLIN)
            return -1
        case SSL_ERROR_WANT_WRITE:
            lastWant = Int16(POLLOUT)
            return -1
        case SSL_ERROR_ZERO_RETURN:
            return 0
        default:
            lastFailure = RedisError(.tls, "TLS with Redis failed: \(Self.sslReason())")
            return -2
        }
    }

    private func retry(_ n: Int, until deadline: UInt64, doing what: String) throws(RedisError) {
        if n == -2 {
            let e = lastFailure ?? RedisError(.unreachable, "Redis connection failed")
            close()
            throw e
        }
        try wait(for: lastWant, until: deadline, doing: what)
    }

    private func wait(for events: Int16, until deadline: UInt64, doing what: String) throws(RedisError) {
        while true {
            let now = DispatchTime.now().uptimeNanoseconds
            guard now < deadline else {
                throw RedisError(.timeout, "Redis timed out \(what) (\(timeoutMillis) ms, [cluster] timeout_ms)")
            }
            var p = pollfd(fd: fd, events: events, revents: 0)
            let ms = Int32(max(1, (deadline - now) / 1_000_000))
            let r = poll(&p, 1, ms)
            if r > 0 { return }
            if r < 0 && errno != EINTR {
                throw RedisError(.unreachable, "Redis connection failed: \(String(cString: strerror(errno)))")
            }
        }
    }

    // MARK: - TLS

    private func handshake(_ tls: RedisEndpoint.TLS, until deadline: UInt64) throws(RedisError) {
        guard let ctx = SSL_CTX_new(TLS_client_method()) else { throw RedisError(.tls, "cannot create a TLS context") }
        self.ctx = ctx
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nil)
        if let ca = tls.ca {
            guard SSL_CTX_load_verify_locations(ctx, ca, nil) == 1 else {
                throw RedisError(.tls, "cannot read the CA file \(ca) ([cluster] ca): \(Self.sslReason())")
            }
        } else {
            SSL_CTX_set_default_verify_paths(ctx)
        }
        if let cert = tls.cert, let key = tls.key {
            guard SSL_CTX_use_certificate_chain_file(ctx, cert) == 1,
                SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) == 1
            else {
                throw RedisError(.tls, "cannot load the client certificate ([cluster] cert, key): \(Self.sslReason())")
            }
        }
        guard let ssl = SSL_new(ctx) else { throw RedisError(.tls, "cannot create a TLS session") }
        self.ssl = ssl
        SSL_set_fd(ssl, fd)
        let host = endpoint.host
        if host.utf8.contains(58) || host.allSatisfy({ $0.isNumber || $0 == "." }) {
            X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host)
        } else {
            _ = ap_probe_set_sni(ssl, host)
            SSL_set1_host(ssl, host)
        }
        while true {
            let r = SSL_connect(ssl)
            if r == 1 { return }
            switch SSL_get_error(ssl, r) {
            case SSL_ERROR_WANT_READ: try wait(for: Int16(POLLIN), until: deadline, doing: "in the TLS handshake")
            case SSL_ERROR_WANT_WRITE: try wait(for: Int16(POLLOUT), until: deadline, doing: "in the TLS handshake")
            default:
                let verify = SSL_get_verify_result(ssl)
                let why =
                    verify != X509_V_OK
                    ? String(cString: X509_verify_cert_error_string(Int(verify))) : Self.sslReason()
                throw RedisError(.tls, "TLS handshake with Redis at \(endpoint.authority) failed: \(why)")
            }
        }
    }

    private static func sslReason() -> String {
        var buf = [CChar](repeating: 0, count: 256)
        guard ap_ssl_last_error(&buf, Int32(buf.count)) != 0 else { return "closed" }
        return String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    // MARK: -

    static func deadline(after millis: Int) -> UInt64 {
        DispatchTime.now().uptimeNanoseconds + UInt64(millis) * 1_000_000
    }

    private static func connectError(_ e: Int32, _ endpoint: RedisEndpoint) -> RedisError {
        if e == ECONNREFUSED {
            return RedisError(.unreachable, "connection refused by \(endpoint.authority): nothing listens there")
        }
        return RedisError(.unreachable, "cannot connect to \(endpoint.authority): \(String(cString: strerror(e)))")
    }
}
