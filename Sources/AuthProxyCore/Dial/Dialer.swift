import Dispatch

#if canImport(Glibc)
    import Glibc
#endif

/// Opens one TCP connection for the ``Connector`` (one attempt: to the destination, or to a parent): blind tunnels,
/// WebSocket-capable tunnels, the own HTTP/1.1 client's connections, and the sockets ``CurlConnector`` hands to
/// libcurl for TLS or a parent's CONNECT (only libcurl transfers, ``CurlTransfer``, connect themselves). One sequence for all of them: an IP literal is used as is, a name is resolved off
/// the loop, `deny_destinations` is checked on the resolved addresses (``DestinationFilter``), and the addresses
/// are tried in turn with a non-blocking connect on a ``SocketChannel``. The connected channel goes to the
/// completion with no owner; the caller makes itself its owner.
///
/// Timeouts stay with the caller (a tunnel's connect deadline, an exchange's upstream timeout), which
/// ``cancel()``s. Confined to `queue`; the caller holds the dialer until the completion runs or it cancels.
final class Dialer: SocketChannelOwner {
    private let host: String
    private let port: Int
    private let deny: [AddressBlock]
    private let queue: DispatchQueue
    /// `SO_KEEPALIVE`, for connections that will wait in a pool.
    private let keepAlive: Bool
    private var completion: ((Result<SocketChannel, DialFailure>) -> Void)?
    private var addresses: [(family: Int32, addr: sockaddr_storage, len: socklen_t)] = []
    private var channel: SocketChannel?
    private var lastError: Int32 = ECONNREFUSED

    init(host: String, port: Int, deny: [AddressBlock], queue: DispatchQueue, keepAlive: Bool) {
        self.host = host
        self.port = port
        self.deny = deny
        self.queue = queue
        self.keepAlive = keepAlive
    }

    func start(_ completion: @escaping (Result<SocketChannel, DialFailure>) -> Void) {
        assertOnQueue(queue)
        self.completion = completion
        if let numeric = numericAddress(host, port: port) {
            resolved(.success([numeric]))
            return
        }
        let host = host, port = port
        let me = LoopBound(self, queue: queue)
        // getaddrinfo blocks: run it off the loop, come back with the answer.
        DispatchQueue.global().async {
            let result = resolve(host: host, port: port)
            me.queue.async { if me.value.completion != nil { me.value.resolved(result) } }
        }
    }

    /// Stops dialing; the completion is not called.
    func cancel() {
        completion = nil
        channel?.close()
        channel = nil
    }

    private func resolved(_ result: ResolveResult) {
        switch result {
        case .success(let all):
            switch DestinationFilter.allowed(all, deny: deny) {
            case .success(let allowed):
                addresses = allowed
                tryNextAddress()
            case .failure(let f):
                finish(.failure(f))
            }
        case .failure(let message):
            finish(.failure(.unresolved(message)))
        case .outOfDescriptors(let e):
            finish(.failure(.outOfDescriptors(e)))
        }
    }

    private func tryNextAddress() {
        while !addresses.isEmpty {
            switch startConnect(to: addresses.removeFirst(), keepAlive: keepAlive) {
            case .connecting(let fd):
                let c = SocketChannel(fd: fd, queue: queue, owner: self)
                channel = c
                c.awaitConnect()
                return
            case .failed(let e):
                lastError = e
            case .outOfDescriptors(let e):
                finish(.failure(.outOfDescriptors(e)))
                return
            }
        }
        finish(.failure(.unreachable(lastError)))
    }

    func channelConnected(_ channel: SocketChannel, error: Int32) {
        guard completion != nil, channel === self.channel else { return }
        if error != 0 {
            lastError = error
            channel.close()
            self.channel = nil
            tryNextAddress()
            return
        }
        self.channel = nil
        channel.owner = nil
        finish(.success(channel))
    }

    // Nothing is read or written before the connect completes.
    func channelReadable(_ channel: SocketChannel) {}
    func channelDrained(_ channel: SocketChannel) {}
    func channelWriteFailed(_ channel: SocketChannel, error: Int32) {}

    private func finish(_ outcome: Result<SocketChannel, DialFailure>) {
        let c = completion
        completion = nil
        c?(outcome)
    }
}
