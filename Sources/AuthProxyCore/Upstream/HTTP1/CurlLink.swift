import CAuthProxyShims
import CCurl

#if canImport(Glibc)
    import Glibc
#endif

/// The TLS layer of one https connection of the proxy's own HTTP/1.1 client: libcurl's connection (made by
/// ``CurlConnector``), read and written with `curl_easy_recv`/`curl_easy_send`, so the records are libcurl's and
/// OpenSSL's as on every other https transfer, while the HTTP/1.1 framing, keep-alive and pooling are the own
/// client's (``HTTP1Transfer``, ``ResponseReader``). What that saves is libcurl's per-request machinery: the
/// handle set up and torn down per request, its connection-cache lookup with two liveness `poll`s and a peek,
/// its header parser (docs/BENCHMARKS.md).
///
/// Its ``SocketChannel`` watches the socket with Dispatch sources and reads and writes through this object
/// (``SecureStream``); when the channel's sources are gone, ``closeDescriptor()`` lets libcurl close the
/// connection (its close callback closes the socket through ``CurlMulti``).
///
/// Confined to the loop's queue, like the multi handle.
final class CurlLink: SecureStream {
    private let multi: CurlMulti
    private let easy: CurlEasyHandle
    /// libcurl's socket (the channel watches it; libcurl closes it).
    let fd: Int32
    private var released = false

    /// The channel's two Dispatch sources on `fd` count as one live source in the multi handle: when libcurl
    /// closes the socket (also at shutdown, when ``CurlMulti/tearDown()`` removes the handle before the channel's
    /// cancel handlers ran), the close waits for them, so a reused descriptor number never meets a stale source.
    init(multi: CurlMulti, easy: CurlEasyHandle, fd: Int32) {
        self.multi = multi
        self.easy = easy
        self.fd = fd
        multi.sourceCreated(fd)
    }

    deinit {
        // Backstop: a link dropped without its channel closing must not keep its connection open.
        release()
    }

    private var usable: Bool { !released && !multi.isTornDown }

    /// One `curl_easy_recv`: decrypted bytes, `wouldBlock` (wait for the socket), `eof` (close_notify, or the
    /// peer closed TCP without one), or an error (reset, or a TLS failure).
    ///
    /// A close without close_notify is an end of input, as on a plain connection: many servers close that way,
    /// and HTTP/1.1 framing (length, chunks) is what tells a complete response from a cut one. The connection's
    /// SSL_CTX says so to OpenSSL (`SSL_OP_IGNORE_UNEXPECTED_EOF`, set by `ap_easy_connect_only_tls`), which then
    /// reports it as it reports a close_notify.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> SocketChannel.ReadResult {
        guard usable else { return .error(EBADF) }
        var n = 0
        switch curl_easy_recv(easy.raw, buffer.baseAddress, buffer.count, &n) {
        case CURLE_OK: return n > 0 ? .bytes(n) : .eof
        case CURLE_AGAIN: return .wouldBlock
        default: return .error(ECONNRESET)
        }
    }

    /// One `curl_easy_send`: bytes taken, 0 when the socket would block (the same bytes are offered again, at
    /// least as many: OpenSSL's write-retry rule, with `SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER` set by the shim),
    /// or -1 with `error` set.
    func send(_ bytes: UnsafeRawBufferPointer, error: inout Int32) -> Int {
        guard usable else {
            error = EBADF
            return -1
        }
        var n = 0
        switch curl_easy_send(easy.raw, bytes.baseAddress, bytes.count, &n) {
        case CURLE_OK: return n
        case CURLE_AGAIN: return 0
        default:
            error = EPIPE
            return -1
        }
    }

    /// Whether OpenSSL holds bytes a read would return without the socket becoming readable again.
    var hasBufferedInput: Bool { usable && ap_easy_tls_has_pending(easy.raw) != 0 }

    /// Closes the connection (libcurl closes the socket) and frees the handle; once.
    func closeDescriptor() {
        release()
    }

    private func release() {
        guard !released else { return }
        released = true
        multi.releaseConnectOnly(easy)
        multi.sourceCancelled(fd)
    }
}
