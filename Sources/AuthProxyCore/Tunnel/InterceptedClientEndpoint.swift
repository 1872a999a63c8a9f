#if canImport(Glibc)
    import Glibc
#endif

/// The client's side of a relay inside an intercepted tunnel (a WebSocket after its `101`): plaintext through the
/// connection's ``TLSSession`` over memory BIOs, ciphertext through its ``SocketChannel``.
///
/// Reading takes what OpenSSL already holds first (records decrypted or fed before the read event), and reads the
/// socket only when OpenSSL wants more, one read at a time, so at most one read's ciphertext waits in the BIO.
/// Whatever OpenSSL produces (data, a close_notify, a TLS 1.3 post-handshake message) is moved to the channel at
/// once: the channel's send queue is the only queue, so the relay's back-pressure sees every byte.
final class InterceptedClientEndpoint: TunnelEndpoint {
    private let channel: SocketChannel
    private let session: TLSSession
    /// The loop's buffer for moving ciphertext out (used by nothing else while this runs).
    private let out: UnsafeMutableRawBufferPointer
    private var tlsFailed = false

    init(channel: SocketChannel, session: TLSSession, out: UnsafeMutableRawBufferPointer) {
        self.channel = channel
        self.session = session
        self.out = out
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> SocketChannel.ReadResult {
        // Bounded: each pass either returns or feeds one socket read; the socket runs dry or reaches EOF.
        while true {
            switch session.read(into: buffer) {
            case .bytes(let n):
                return .bytes(n)
            case .closed:
                flush()
                return .eof
            case .failed:
                tlsFailed = true
                return .error(EPROTO)
            case .wantMore:
                flush()
            }
            // The plaintext buffer doubles as the ciphertext one: the session copies what it is fed.
            switch channel.read(into: buffer) {
            case .bytes(let n):
                session.feed(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            case .wouldBlock:
                return .wouldBlock
            case .eof:
                // Without a close_notify: a cut, passed on as the end all the same.
                return .eof
            case .error(let e):
                return .error(e)
            }
        }
    }

    func write(_ bytes: UnsafeRawBufferPointer) {
        guard !failed else { return }
        if !session.write(bytes) { tlsFailed = true }
        flush()
    }

    private func flush() {
        session.drain(through: out) { channel.write($0) }
    }

    var pendingCount: Int { channel.pendingCount }
    var failed: Bool { tlsFailed || channel.failed }
    var isReading: Bool { channel.isReading }
    func pauseReading() { channel.pauseReading() }
    func resumeReading() { channel.resumeReading() }
    var lastSendProgress: UInt64 { channel.lastSendProgress }

    func shutdownWriteWhenFlushed() {
        session.shutdown()
        flush()
        channel.shutdownWriteWhenFlushed()
    }
}
