/// Why a Redis operation failed, in words an operator can act on; never a password or a token.
struct RedisError: Error, Sendable, Equatable, CustomStringConvertible {
    enum Kind: Sendable, Equatable {
        /// Nothing listens, refused, DNS, reset.
        case unreachable
        /// `[cluster] timeout_ms` passed.
        case timeout
        /// Wrong user or password, or none given where one is needed (WRONGPASS, NOAUTH, NOPERM).
        case authentication
        /// A read-only replica (after a failover): writes are refused.
        case readOnly
        /// A Redis Cluster endpoint (MOVED, ASK, CLUSTERDOWN): not supported.
        case clusterMode
        /// TLS handshake or certificate verification failed.
        case tls
        /// Not RESP, or an unexpected reply.
        case protocolError
        /// Any other error reply.
        case server
    }

    var kind: Kind
    var message: String

    init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    var description: String { message }

    /// The error an error reply stands for: the first word of a Redis error is its code.
    static func reply(_ text: String, command: String) -> RedisError {
        let code = text.prefix { $0 != " " }.uppercased()
        switch code {
        case "WRONGPASS", "NOAUTH", "NOPERM":
            return RedisError(
                .authentication, "Redis refused \(command): \(text) (check the user and password of [cluster] redis)")
        case "READONLY":
            return RedisError(.readOnly, "Redis is a read-only replica (after a failover?): \(command) refused")
        case "MOVED", "ASK", "CLUSTERDOWN", "CROSSSLOT":
            return RedisError(
                .clusterMode,
                "cluster mode is not supported: the Redis endpoint answered \(code) (a Redis Cluster); use a single Redis, or a primary behind a failover address"
            )
        default:
            return RedisError(.server, "Redis refused \(command): \(text)")
        }
    }
}
