/// `authproxy login` and `signout` with `[cluster]`: the refresh token of an `oauth-user` credential is written to
/// (or deleted from) the fleet's Redis, and a notice makes every replica look at once — sign in once, every replica
/// uses it; sign out once, every replica stops. Synchronous: the command line has nothing else to do meanwhile.
public enum ClusterSignIn {
    /// The refresh token Redis holds for `c`, nil when none (for `signout`, which revokes it).
    public static func refreshToken(_ c: Credential, config: ProxyConfig) throws(StateError) -> String? {
        try withRedis(config) { (conn, keys) throws(RedisError) -> String? in
            let key = keys.refreshKey(fingerprint: Crypto.sha256Hex(c.identityMaterial))
            guard case .string(let v) = try conn.command(["GET", key]) else { return nil }
            return keys.openRefresh(v, under: key)?.refreshToken
        }
    }

    /// Stores `refreshToken` as the refresh token of `c` (nil: deletes it), then tells the replicas.
    public static func store(
        _ c: Credential, config: ProxyConfig, refreshToken: String?, expires: Int64? = nil, username: String? = nil
    ) throws(StateError) {
        let fingerprint = Crypto.sha256Hex(c.identityMaterial)
        let record = refreshToken.map {
            TokenStateFile.StoredRefreshToken(
                credential: c.name, fingerprint: fingerprint, refreshToken: $0, expires: expires, username: username,
                issued: nowMillis())
        }
        try withRedis(config) { (conn, keys) throws(RedisError) in
            let key = keys.refreshKey(fingerprint: fingerprint)
            if let record {
                guard let value = keys.seal(record, under: key) else {
                    throw RedisError(.protocolError, "cannot seal the refresh token")
                }
                var args = ["SET", key, value]
                if let expires = record.expires {
                    let ttl = expires - nowMillis()
                    guard ttl > 0 else { throw RedisError(.protocolError, "the refresh token has expired already") }
                    args += ["PX", String(ttl)]
                }
                try conn.command(args)
            } else {
                try conn.command(["DEL", key])
            }
            try conn.command(["PUBLISH", keys.channel, ClusterKeys.Notice.signIn.text])
        }
    }

    private static func withRedis<T>(
        _ config: ProxyConfig, _ body: (RedisConnection, ClusterKeys) throws(RedisError) -> T
    ) throws(StateError) -> T {
        guard let cluster = config.cluster, let stateKey = config.stateKey,
            let keys = ClusterKeys(stateKey: stateKey, prefix: cluster.keyPrefix)
        else { throw StateError("no [cluster] with a state_key in the configuration") }
        // The command line may wait longer than a serving replica: a sign-in must not be lost to a slow moment.
        let conn = RedisConnection(endpoint: cluster.endpoint, timeoutMillis: max(cluster.timeoutMillis, 5000))
        do throws(RedisError) {
            try conn.open()
            defer { conn.close() }
            return try body(conn, keys)
        } catch {
            throw StateError("Redis at \(cluster.endpoint.redacted) ([cluster]): \(error.message)", kind: .unreadable)
        }
    }
}
