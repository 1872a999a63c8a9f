import CAuthProxyShims
import COpenSSL
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The TLS part of `authproxy doctor`: one blocking connection with OpenSSL, made *without* a client
/// certificate, to see what the server presents and what it asks for.
///
/// - The handshake runs with verification off so it always completes; the peer's chain is then verified
///   apart, against the system CAs and against the `server-trust` credential of `--config` (CA file, pin or
///   `insecure`, as libcurl applies them in ``CurlEasyHandle/applyTrust(_:)``).
/// - The client-certificate callback counts the server's CertificateRequests. TLS 1.3 post-handshake
///   authentication is enabled, and one `GET` for the probed path is sent, so a server that asks only for
///   some paths (Apache's per-`Location` `SSLVerifyClient`) is seen too, and so is its refusal ("tlsv13 alert
///   certificate required" comes after a TLS 1.3 handshake that looked fine).
struct TLSProbe {
    var host: String
    var port: Int
    var timeoutSeconds: Int
    /// Path and query of the probed URL (sent to this server only, as the URL itself would be).
    var pathAndQuery: String
    /// The `server-trust` credential that applies, from `--config`.
    var trust: (name: String, settings: ServerTrustSettings)?

    func run() throws(DoctorError) -> DoctorFindings.TLS {
        let fd = try connect()
        defer { close(fd) }
        guard let ctx = SSL_CTX_new(TLS_client_method()) else { throw DoctorError(.tls, "OpenSSL: \(openSSLError())") }
        defer { SSL_CTX_free(ctx) }
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nil)
        guard let ssl = SSL_new(ctx) else { throw DoctorError(.tls, "OpenSSL: \(openSSLError())") }
        defer { SSL_free(ssl) }
        SSL_set_fd(ssl, fd)
        if !isIPLiteral { _ = ap_probe_set_sni(ssl, host) }
        let requests = UnsafeMutablePointer<Int32>.allocate(capacity: 1)
        requests.pointee = 0
        defer { requests.deallocate() }
        ap_probe_watch_client_cert(ssl, requests)
        ERR_clear_error()

        let destination = "\(urlHost):\(port)"
        if SSL_connect(ssl) != 1 {
            let timedOut = errno == EAGAIN || errno == EWOULDBLOCK
            let reason = Self.reason(ssl)
            if timedOut && reason.isEmpty {
                throw DoctorError(
                    .timeout, "timeout: the TLS handshake with \(destination) did not finish within \(timeoutSeconds) s"
                )
            }
            guard requests.pointee > 0 else {
                throw DoctorError(
                    .tls, "TLS handshake with \(destination) failed: \(reason.isEmpty ? "connection closed" : reason)")
            }
            // Asked for a certificate and gave up without one (TLS 1.2 servers end the handshake there).
            return findings(
                ssl, version: "TLS (handshake refused)",
                request: clientCertificateRequest(ssl, duringHandshake: true, refusal: reason))
        }
        let inHandshake = requests.pointee
        let version = String(cString: SSL_get_version(ssl))
        let refusal = sendProbeRequest(ssl)
        var request: DoctorFindings.ClientCertificateRequest? = nil
        if requests.pointee > 0 {
            request = clientCertificateRequest(ssl, duringHandshake: inHandshake > 0, refusal: refusal)
        }
        return findings(ssl, version: version, request: request)
    }

    private var isIPLiteral: Bool { IPAddress.parse(host) != nil }
    private var urlHost: String { host.contains(":") ? "[\(host)]" : host }

    private func findings(_ ssl: OpaquePointer, version: String, request: DoctorFindings.ClientCertificateRequest?)
        -> DoctorFindings.TLS
    {
        var digest = [UInt8](repeating: 0, count: 32)
        let pin = ap_probe_peer_pubkey_sha256(ssl, &digest) == 1 ? "sha256//" + Data(digest).base64EncodedString() : ""
        var t = DoctorFindings.TLS(
            version: version,
            subject: Self.text { ap_probe_peer_subject(ssl, $0, $1) } ?? "(no certificate)",
            issuer: Self.text { ap_probe_peer_issuer(ssl, $0, $1) } ?? "(unknown)",
            notAfter: Self.text { ap_probe_peer_not_after(ssl, $0, $1) },
            publicKeyPin: pin,
            systemTrust: verify(ssl, caFile: nil),
            configuredTrust: nil,
            clientCertificate: request)
        if let trust {
            let s = trust.settings
            let setting: String
            let v: DoctorFindings.Verification
            if s.insecure {
                setting = "insecure = true"
                v = .verified
            } else if let pins = s.pinnedPublicKey {
                setting = "pinned_public_key"
                let accepted = pins.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
                if !accepted.contains(pin) {
                    v = DoctorFindings.Verification(ok: false, reason: "the server's key \(pin) is not the pinned one")
                } else if ap_probe_peer_matches_host(ssl, host) != 1 {
                    v = DoctorFindings.Verification(
                        ok: false,
                        reason: "the certificate is not valid for \(host) (the pin does not excuse the host name)")
                } else {
                    v = .verified
                }
            } else if let ca = s.caFile {
                setting = "ca_file \(ca)"
                v = verify(ssl, caFile: ca)
            } else {
                setting = "no setting"
                v = verify(ssl, caFile: nil)
            }
            t.configuredTrust = DoctorFindings.ConfiguredTrust(
                credential: trust.name, setting: setting, verification: v)
        }
        return t
    }

    private func verify(_ ssl: OpaquePointer, caFile: String?) -> DoctorFindings.Verification {
        var buf = [CChar](repeating: 0, count: 256)
        let r = ap_probe_verify_peer(ssl, host, caFile, &buf, Int32(buf.count))
        return r == 0 ? .verified : DoctorFindings.Verification(ok: false, reason: Self.string(buf))
    }

    private func clientCertificateRequest(_ ssl: OpaquePointer, duringHandshake: Bool, refusal: String?)
        -> DoctorFindings.ClientCertificateRequest
    {
        var issuers: [String] = []
        let n = ap_probe_client_ca_count(ssl)
        if n > 0 {
            for i in 0..<n {
                if let name = Self.text({ ap_probe_client_ca_name(ssl, i, $0, $1) }) { issuers.append(name) }
            }
        }
        return DoctorFindings.ClientCertificateRequest(
            acceptedIssuers: issuers, duringHandshake: duringHandshake, refusal: refusal)
    }

    /// Sends `GET <path>` and reads the first bytes of the answer; returns the TLS error that ended the
    /// connection instead (a refused client certificate), or nil when the server answered.
    private func sendProbeRequest(_ ssl: OpaquePointer) -> String? {
        let hostHeader = (port == 443) ? urlHost : "\(urlHost):\(port)"
        let request =
            "GET \(pathAndQuery) HTTP/1.1\r\nHost: \(hostHeader)\r\nUser-Agent: authproxy-doctor/\(AuthProxyVersion.string)\r\n"
            + "Accept: */*\r\nConnection: close\r\n\r\n"
        var bytes = Array(request.utf8)
        ERR_clear_error()
        if SSL_write(ssl, &bytes, Int32(bytes.count)) <= 0 {
            let r = Self.reason(ssl)
            return r.isEmpty ? "the connection was closed" : r
        }
        var buf = [UInt8](repeating: 0, count: 512)
        let n = SSL_read(ssl, &buf, Int32(buf.count))
        if n > 0 { return nil }
        let r = Self.reason(ssl)
        // A timeout or a bare close says nothing about certificates.
        return r.isEmpty ? nil : r
    }

    /// The TCP connection, trying each address in turn; the error names the cause of the last failure.
    private func connect() throws(DoctorError) -> Int32 {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = isIPLiteral ? AI_NUMERICHOST : 0
        var list: UnsafeMutablePointer<addrinfo>? = nil
        let rc = getaddrinfo(host, String(port), &hints, &list)
        guard rc == 0, let first = list else {
            throw DoctorError(.dns, "cannot resolve host \(host): \(String(cString: gai_strerror(rc)))")
        }
        defer { freeaddrinfo(list) }
        var lastError: DoctorError = DoctorError(.connect, "cannot connect to \(urlHost):\(port)")
        var p: UnsafeMutablePointer<addrinfo>? = first
        while let a = p {
            p = a.pointee.ai_next
            let fd = socket(
                a.pointee.ai_family, a.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue), a.pointee.ai_protocol)
            guard fd >= 0 else { continue }
            let flags = fcntl(fd, F_GETFL)
            _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
            var ok = Glibc.connect(fd, a.pointee.ai_addr, a.pointee.ai_addrlen) == 0
            var err = errno
            if !ok, err == EINPROGRESS {
                var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                let ready = poll(&pfd, 1, Int32(timeoutSeconds * 1000))
                if ready == 0 {
                    err = ETIMEDOUT
                } else {
                    var soError: Int32 = 0
                    var len = socklen_t(MemoryLayout<Int32>.size)
                    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soError, &len)
                    err = soError
                    ok = soError == 0
                }
            }
            if ok {
                _ = fcntl(fd, F_SETFL, flags)
                var tv = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
                setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
                return fd
            }
            close(fd)
            let address = Self.numericAddress(a)
            switch err {
            case ETIMEDOUT:
                lastError = DoctorError(
                    .timeout,
                    "timeout: connecting to \(urlHost):\(port) (\(address)) took longer than \(timeoutSeconds) s")
            case ECONNREFUSED:
                lastError = DoctorError(
                    .connect, "connection refused by \(urlHost):\(port) (\(address)): nothing listens there")
            default:
                lastError = DoctorError(
                    .connect, "cannot connect to \(urlHost):\(port) (\(address)): \(String(cString: strerror(err)))")
            }
        }
        throw lastError
    }

    private static func numericAddress(_ a: UnsafeMutablePointer<addrinfo>) -> String {
        var buf = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        guard
            getnameinfo(a.pointee.ai_addr, a.pointee.ai_addrlen, &buf, socklen_t(buf.count), nil, 0, NI_NUMERICHOST)
                == 0
        else {
            return "?"
        }
        return Self.string(buf)
    }

    /// OpenSSL's reason for the last failure on `ssl` (the error queue, cleared), or "" when it has none.
    private static func reason(_ ssl: OpaquePointer) -> String {
        var buf = [CChar](repeating: 0, count: 256)
        let code = ap_ssl_last_error(&buf, Int32(buf.count))
        guard code != 0 else { return "" }
        // "error:0A000074:SSL routines::tlsv13 alert certificate required" → the part after the last "::" or ":".
        let s = Self.string(buf)
        if let r = s.range(of: ":", options: .backwards) { return String(s[r.upperBound...]) }
        return s
    }

    /// The NUL-terminated text in `buf`.
    private static func string(_ buf: [CChar]) -> String {
        String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// A C string a shim writes into a buffer; nil when it wrote none.
    private static func text(_ write: (UnsafeMutablePointer<CChar>, Int32) -> Int32) -> String? {
        var buf = [CChar](repeating: 0, count: 1024)
        guard write(&buf, Int32(buf.count)) == 1 else { return nil }
        let s = Self.string(buf)
        return s.isEmpty ? nil : s
    }
}
