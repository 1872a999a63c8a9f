/// One TCP connection of the proxy's own HTTP/1.1 client (``HTTP1Transfer``), plain or TLS (then read and
/// written through libcurl, ``CurlLink``): in use by one exchange, or idle in its loop's
/// ``UpstreamConnectionPool`` until the next exchange to the same destination takes it.
///
/// An idle connection keeps reading: any event on it (the server closed it, or sent bytes nobody asked for)
/// closes it at once, so a connection taken from the pool needs no liveness check of its own; one that dies
/// between being taken and being written to is retried once by the exchange on a new connection.
///
/// Confined to its loop's queue. The exchange using it holds it and clears ``user`` before letting go (it is
/// `unowned(unsafe)`: a weak reference would cost a side table per exchange); the pool holds it while idle.
final class UpstreamConnection: SocketChannelOwner {
    let channel: SocketChannel
    let key: UpstreamConnectionPool.Key
    private unowned(unsafe) let pool: UpstreamConnectionPool
    /// The exchange using the connection; nil while it is idle.
    unowned(unsafe) var user: HTTP1Transfer?
    /// Bytes read and not yet consumed: a head line split across reads, or body bytes held while the client is
    /// slow (reading is paused meanwhile).
    var inbuf = ByteBuffer()
    /// When the connection went idle (uptime ns).
    var idleSince: UInt64 = 0
    /// Requests it carried to the end.
    var exchanges = 0

    /// A plain connection the ``Dialer`` connected.
    init(channel: SocketChannel, key: UpstreamConnectionPool.Key, pool: UpstreamConnectionPool) {
        self.key = key
        self.pool = pool
        self.channel = channel
        channel.owner = self
    }

    func channelReadable(_ channel: SocketChannel) {
        if let u = user { u.connectionReadable() } else { pool.idleConnectionStirred(self) }
    }

    func channelDrained(_ channel: SocketChannel) {
        user?.connectionDrained()
    }

    func channelWriteFailed(_ channel: SocketChannel, error: Int32) {
        if let u = user { u.connectionWriteFailed(error) } else { pool.idleConnectionStirred(self) }
    }

    // Connected before it is handed over (``Connector``).
    func channelConnected(_ channel: SocketChannel, error: Int32) {}

    /// Closes the socket; nothing is reported afterwards.
    func close() {
        user = nil
        inbuf.removeAll()
        channel.close()
    }
}
