/// One side of a ``Tunnel``'s relay as the relay sees it: bytes in and out, a send queue to watch for
/// back-pressure, reading paused and resumed, and a half-close once what is queued is written.
///
/// The upstream side and a plain client are a ``SocketChannel`` (TLS under it, where there is some, is the
/// channel's layer: ``CurlLink`` upstream, ``ProxyTLSLink`` for a client of an `https://` proxy URL). A client
/// inside an intercepted tunnel is an ``InterceptedClientEndpoint``: its TLS runs over memory BIOs above the
/// channel, so the relay reads and writes plaintext there.
///
/// Confined to the connection's loop queue.
protocol TunnelEndpoint: AnyObject {
    /// Plaintext into `buffer`: `.wouldBlock` only when nothing more can be had without a new read event.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> SocketChannel.ReadResult
    func write(_ bytes: UnsafeRawBufferPointer)
    /// Bytes queued for this side and not written to its socket yet.
    var pendingCount: Int { get }
    /// A write failed: nothing more goes out.
    var failed: Bool { get }
    var isReading: Bool { get }
    func pauseReading()
    func resumeReading()
    /// Ends this side's sending (a TLS close_notify where there is TLS) once everything queued is written.
    func shutdownWriteWhenFlushed()
    /// When a write last moved bytes to the socket (uptime ns).
    var lastSendProgress: UInt64 { get }
}

extension SocketChannel: TunnelEndpoint {}
