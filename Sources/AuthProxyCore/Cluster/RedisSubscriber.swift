import Dispatch
import Logging
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The fleet's notices: a connection of its own in subscribe mode (RESP2 allows no other command on it), on a
/// thread of its own, reconnecting with a backoff. Pub/sub is fire-and-forget — whatever is published while this
/// connection is down is lost — so every notice is only a hint: waiters also poll, and after each (re)subscription
/// `onSubscribed` lets the store look again at what it waits for.
///
/// Ownership: `run()` owns the connection on `queue`; `stop()` may be called from any thread.
final class RedisSubscriber: Sendable {
    private let config: ClusterConfig
    private let channel: String
    private let logger: Logger
    private let deliver: @Sendable (String) -> Void
    private let onSubscribed: @Sendable () -> Void
    private let stopped = Atomic<Bool>(false)
    private let queue = ProxyQueue.ownThread("authproxy.cluster-notices")

    /// Silence after which a PING checks that the connection is alive.
    static let idleCheckMillis = 10_000

    init(
        config: ClusterConfig, channel: String, logger: Logger, onSubscribed: @escaping @Sendable () -> Void,
        deliver: @escaping @Sendable (String) -> Void
    ) {
        self.config = config
        self.channel = channel
        self.logger = logger
        self.onSubscribed = onSubscribed
        self.deliver = deliver
    }

    func start() { queue.async { self.run() } }

    func stop() { stopped.store(true, ordering: .relaxed) }

    private var isStopped: Bool { stopped.load(ordering: .relaxed) }

    private func run() {
        var backoff = TokenBackoff()
        while !isStopped {
            let c = RedisConnection(endpoint: config.endpoint, timeoutMillis: config.timeoutMillis)
            do throws(RedisError) {
                try c.open()
                try c.send(
                    [Array("SUBSCRIBE".utf8), Array(channel.utf8)],
                    until: RedisConnection.deadline(after: config.timeoutMillis))
                guard
                    case .array(let confirm)? = try c.receive(
                        until: RedisConnection.deadline(after: config.timeoutMillis)),
                    confirm.first?.text == "subscribe"
                else { throw RedisError(.protocolError, "SUBSCRIBE was not confirmed") }
                backoff.succeeded()
                onSubscribed()
                try listen(c)
            } catch {
                c.close()
                if isStopped { return }
                // The store's own connection logs Redis's state; this one only says why notices stopped.
                logger.debug("the fleet's notice connection failed", metadata: ["cause": "\(error.message)"])
                var wait = backoff.failed(at: nowMillis())
                while wait > 0, !isStopped {
                    let step = min(wait, 200)
                    usleep(UInt32(step) * 1000)
                    wait -= step
                }
            }
        }
    }

    /// Reads notices until the connection fails or the subscriber stops; a silent connection is checked with PING.
    private func listen(_ c: RedisConnection) throws(RedisError) {
        var lastHeard = nowMillis()
        var pinged = false
        while !isStopped {
            guard let reply = try c.receive(until: RedisConnection.deadline(after: 500)) else {
                let silent = nowMillis() - lastHeard
                if silent > Int64(Self.idleCheckMillis + config.timeoutMillis), pinged {
                    throw RedisError(.timeout, "no answer to PING on the notice connection")
                }
                if silent > Int64(Self.idleCheckMillis), !pinged {
                    try c.send([Array("PING".utf8)], until: RedisConnection.deadline(after: config.timeoutMillis))
                    pinged = true
                }
                continue
            }
            lastHeard = nowMillis()
            pinged = false
            if case .array(let parts) = reply, parts.count == 3, parts[0].text == "message", let text = parts[2].text {
                deliver(text)
            }
        }
    }
}
