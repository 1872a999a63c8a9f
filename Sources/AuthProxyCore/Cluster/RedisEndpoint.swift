/// Where Redis is and how to log in: `[cluster] redis = "redis://[user:password@]host[:port][/db]"` or
/// `rediss://…` (TLS). User and password are percent-decoded; they appear in no description.
public struct RedisEndpoint: Sendable, Equatable {
    public struct TLS: Sendable, Equatable {
        /// CA file the server's certificate must chain to; nil: the system's trust store.
        public var ca: String?
        /// Client certificate and key (PEM), when Redis asks for one (`tls-auth-clients`).
        public var cert: String?
        public var key: String?

        public init(ca: String? = nil, cert: String? = nil, key: String? = nil) {
            self.ca = ca
            self.cert = cert
            self.key = key
        }
    }

    public var host: String
    public var port: Int = 6379
    public var database: Int = 0
    public var user: String?
    public var password: String?
    /// Set for `rediss://`.
    public var tls: TLS?

    /// What is wrong with a `[cluster] redis` URL (never quoting it).
    public struct Problem: Error, Sendable, Equatable {
        public var message: String
    }

    /// `host:port` (brackets around IPv6), for messages: never the user or password.
    public var authority: String { (host.contains(":") ? "[\(host)]" : host) + ":\(port)" }

    /// The URL without user or password, for logs and the status page.
    public var redacted: String { "\(tls == nil ? "redis" : "rediss")://\(authority)/\(database)" }

    /// Parses a `redis://` or `rediss://` URL; the error says what is wrong without quoting the URL (it may hold
    /// a password).
    public static func parse(_ text: String) -> Result<RedisEndpoint, Problem> {
        let scheme: String
        var rest: Substring
        if text.hasPrefix("redis://") {
            scheme = "redis"
            rest = text.dropFirst(8)
        } else if text.hasPrefix("rediss://") {
            scheme = "rediss"
            rest = text.dropFirst(9)
        } else {
            return .failure(Problem(message: "must start with redis:// or rediss:// (TLS)"))
        }
        var user: String?
        var password: String?
        if let at = rest.lastIndex(of: "@") {
            let info = rest[..<at]
            rest = rest[rest.index(after: at)...]
            let bad = "has a bad percent-encoding in its user or password"
            if let colon = info.firstIndex(of: ":") {
                guard let u = percentDecoded(String(info[..<colon])),
                    let p = percentDecoded(String(info[info.index(after: colon)...]))
                else { return .failure(Problem(message: bad)) }
                user = u.isEmpty ? nil : u
                password = p
            } else if !info.isEmpty {
                // redis://password@host, as redis-cli -u reads it.
                guard let p = percentDecoded(String(info)) else { return .failure(Problem(message: bad)) }
                password = p
            } else {
                return .failure(Problem(message: "has an empty user information part before @"))
            }
        }
        var database = 0
        if let slash = rest.firstIndex(of: "/") {
            let db = rest[rest.index(after: slash)...]
            rest = rest[..<slash]
            if !db.isEmpty {
                guard let n = Int(db), (0...15_999).contains(n) else {
                    return .failure(
                        Problem(message: "has a database number that is not a number (after the host: /0, /1, …)"))
                }
                database = n
            }
        }
        var host: Substring
        var port = 6379
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else {
                return .failure(Problem(message: "has an IPv6 address without its closing ]"))
            }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":"), let p = Int(after.dropFirst()), (1...65535).contains(p) else {
                    return .failure(Problem(message: "has a bad port"))
                }
                port = p
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            guard let p = Int(rest[rest.index(after: colon)...]), (1...65535).contains(p) else {
                return .failure(Problem(message: "has a bad port"))
            }
            port = p
        } else {
            host = rest
        }
        guard !host.isEmpty, !host.contains(where: { $0 == "?" || $0 == "#" || $0 == " " }) else {
            return .failure(Problem(message: "needs a host (redis://host:6379/0)"))
        }
        return .success(
            RedisEndpoint(
                host: String(host), port: port, database: database, user: user, password: password,
                tls: scheme == "rediss" ? TLS() : nil))
    }

    private static func percentDecoded(_ s: String) -> String? {
        var out: [UInt8] = []
        var bytes = Array(s.utf8)[...]
        while let b = bytes.first {
            bytes = bytes.dropFirst()
            if b == UInt8(ascii: "%") {
                guard bytes.count >= 2, let v = UInt8(String(decoding: bytes.prefix(2), as: UTF8.self), radix: 16)
                else {
                    return nil
                }
                out.append(v)
                bytes = bytes.dropFirst(2)
            } else {
                out.append(b)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// `[cluster]`: the replicas of a fleet share their tokens through one Redis.
public struct ClusterConfig: Sendable, Equatable {
    public var endpoint: RedisEndpoint
    /// Every key and the notice channel start with it, so several fleets can share one Redis.
    public var keyPrefix = "authproxy:"
    /// The limit of every Redis operation; past it the replica goes on alone (its memory and state file).
    public var timeoutMillis = 200
    /// Whether `/readyz` reports not ready while Redis cannot be used.
    public var required = false
    /// How long a replica waits for the token of another replica holding the fleet's lock before it fetches the
    /// token itself. Shorter than the token request timeout the lock lives for: anyone who can write to Redis can
    /// hold a lock, and every token need would otherwise wait the whole timeout (60 s by default) for nothing.
    public var lockWaitSeconds = 5
    /// The fleet's size: while Redis cannot be used, each replica allows this share of a fleet-wide limit
    /// (`rate_limit` with `scope = "credential"`, `daily_quota`). Required when such a limit is configured.
    public var replicas: Int? = nil

    public init(endpoint: RedisEndpoint) {
        self.endpoint = endpoint
    }
}
