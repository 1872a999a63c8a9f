import Foundation

/// What a fleet's Redis holds, and how it is named and sealed. Pure: no I/O, tested with values.
///
/// - **Names** are HMAC-SHA256 under a key derived from `state_key`, of the credential's settings fingerprint and
///   the server root (plus the sign-in's grant for `oauth-user`): no credential name, host or user appears, and
///   only holders of `state_key` can tell which slot a name stands for.
/// - **Values** are AES-256-GCM under another key derived from `state_key`, with the full Redis key name as
///   associated data (a value copied under another name does not open). A value starts with a digest of the token
///   (HMAC, hex) so a compare-and-delete can check in Redis which token it holds without decrypting.
struct ClusterKeys: Sendable {
    let prefix: String
    private let nameKey: [UInt8]
    private let sealKey: [UInt8]

    /// Derives both keys from `stateKey` (PBKDF2, as the state file; a fixed salt, since every replica must derive
    /// the same keys). Slow on purpose: done once at start.
    init?(stateKey: String, prefix: String) {
        guard let master = Crypto.deriveKey(secret: stateKey, salt: Array("authproxy cluster v1".utf8)) else {
            return nil
        }
        self.prefix = prefix
        nameKey = Crypto.hmacSHA256(key: master, Array("names".utf8))
        sealKey = Crypto.hmacSHA256(key: master, Array("values".utf8))
    }

    /// The slot's name (hex).
    func name(_ slot: TokenSlot) -> String {
        Crypto.hex(
            Crypto.hmacSHA256(
                key: nameKey, Array("token\u{0}\(slot.fingerprint)\u{0}\(slot.root)\u{0}\(slot.grant ?? "")".utf8)))
    }

    func tokenKey(_ name: String) -> String { prefix + "t:" + name }
    /// The mark that the token of `name` with `digest` was withdrawn (rejected upstream), kept for the token's
    /// remaining life: a replica whose notice connection was down when the withdrawal was published finds it when
    /// it reconnects (an absent token key alone cannot be told from a Redis restart).
    func withdrawnKey(_ name: String, digest: String) -> String { prefix + "x:" + name + ":" + digest }
    func lockKey(_ name: String) -> String { prefix + "l:" + name }
    /// The refresh token of the credential with settings `fingerprint`.
    func refreshKey(fingerprint: String) -> String {
        prefix + "r:" + Crypto.hex(Crypto.hmacSHA256(key: nameKey, Array("refresh\u{0}\(fingerprint)".utf8)))
    }
    var channel: String { prefix + "events" }
    /// The name of the fleet's lock for exchanging the refresh token of the credential with settings `fingerprint`
    /// (its lock key is ``lockKey(_:)`` of it, like a token slot's).
    func exchangeName(fingerprint: String) -> String {
        Crypto.hex(Crypto.hmacSHA256(key: nameKey, Array("exchange\u{0}\(fingerprint)".utf8)))
    }

    /// The base of the counter keys of a ``FleetLimit`` (the lease script appends `:<window index>`): the
    /// credential's name, the kind of limit and its figures, under HMAC (a changed limit counts in a window of its
    /// own).
    func limitKey(_ limit: FleetLimit) -> String {
        prefix + "q:"
            + Crypto.hex(
                Crypto.hmacSHA256(
                    key: nameKey,
                    Array(
                        "limit\u{0}\(limit.kind.rawValue)\u{0}\(limit.credential)\u{0}\(limit.requests)\u{0}\(limit.windowSeconds)"
                            .utf8)))
    }

    /// The digest a value starts with and notices carry: 32 hex digits of an HMAC of the token.
    func digest(_ value: String) -> String {
        String(Crypto.hex(Crypto.hmacSHA256(key: nameKey, Array("value\u{0}\(value)".utf8))).prefix(32))
    }

    /// `digest.base64(sealed JSON)`, for the Redis key `key`.
    func seal(_ token: IssuedToken, under key: String) -> String? {
        guard let json = try? JSONEncoder().encode(token),
            let box = Crypto.seal(Array(json), key: sealKey, aad: Array(key.utf8))
        else { return nil }
        return digest(token.value) + "." + Data(box).base64EncodedString()
    }

    /// The token in `value` read from Redis key `key`; nil when it does not open (another `state_key`, altered,
    /// or moved from another key).
    func open(_ value: [UInt8], under key: String) -> IssuedToken? {
        guard let json = openBox(value, under: key) else { return nil }
        return try? JSONDecoder().decode(IssuedToken.self, from: Data(json))
    }

    func seal(_ record: TokenStateFile.StoredRefreshToken, under key: String) -> String? {
        guard let json = try? JSONEncoder().encode(record),
            let box = Crypto.seal(Array(json), key: sealKey, aad: Array(key.utf8))
        else { return nil }
        return digest(record.refreshToken) + "." + Data(box).base64EncodedString()
    }

    func openRefresh(_ value: [UInt8], under key: String) -> TokenStateFile.StoredRefreshToken? {
        guard let json = openBox(value, under: key) else { return nil }
        return try? JSONDecoder().decode(TokenStateFile.StoredRefreshToken.self, from: Data(json))
    }

    private func openBox(_ value: [UInt8], under key: String) -> [UInt8]? {
        guard let dot = value.firstIndex(of: UInt8(ascii: ".")),
            let box = Data(base64Encoded: Data(value[(dot + 1)...]))
        else { return nil }
        return Crypto.open(Array(box), key: sealKey, aad: Array(key.utf8))
    }

    /// The notices on ``channel``: `t <name>` a token was written, `u <name>` a lock was given up without one,
    /// `d <name> <digest>` the token with that digest was withdrawn, `g` a sign-in changed.
    enum Notice: Equatable {
        case written(String)
        case unlocked(String)
        case withdrawn(String, digest: String)
        case signIn

        var text: String {
            switch self {
            case .written(let n): "t \(n)"
            case .unlocked(let n): "u \(n)"
            case .withdrawn(let n, let d): "d \(n) \(d)"
            case .signIn: "g"
            }
        }

        static func parse(_ text: String) -> Notice? {
            let parts = text.split(separator: " ").map(String.init)
            switch (parts.first, parts.count) {
            case ("t", 2): return .written(parts[1])
            case ("u", 2): return .unlocked(parts[1])
            case ("d", 3): return .withdrawn(parts[1], digest: parts[2])
            case ("g", 1): return .signIn
            default: return nil
            }
        }
    }

    // MARK: - scripts (run atomically in Redis)

    /// KEYS: lock, token. ARGV: lease, value, ttl ms, channel, notice. Writes the token only while the lock still
    /// holds this replica's lease (a replica whose lock expired cannot overwrite a newer token), then releases the
    /// lock and publishes. 1 when written.
    static let publishScript = """
        if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
        redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
        redis.call('DEL', KEYS[1])
        redis.call('PUBLISH', ARGV[4], ARGV[5])
        return 1
        """

    /// KEYS: lock, refresh token. ARGV: digest prefix of the refresh token exchanged ("digest."), lease, new value,
    /// ttl ms (0: none), channel, notice. Replaces the refresh token only if it is still the one exchanged (another
    /// replica's exchange, a new sign-in or a sign-out wins), releases the lock if it is still this replica's lease,
    /// and publishes. 1 when written.
    static let exchangeScript = """
        local v = redis.call('GET', KEYS[2])
        local ours = redis.call('GET', KEYS[1]) == ARGV[2]
        if not v or string.sub(v, 1, string.len(ARGV[1])) ~= ARGV[1] then
          if ours then redis.call('DEL', KEYS[1]) end
          return 0
        end
        if ARGV[4] == '0' then
          redis.call('SET', KEYS[2], ARGV[3])
        else
          redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
        end
        if ours then redis.call('DEL', KEYS[1]) end
        redis.call('PUBLISH', ARGV[5], ARGV[6])
        return 1
        """

    /// KEYS: the limit's key base. ARGV: limit, window seconds, permits wanted, carry, carry window. On Redis's
    /// clock (`TIME`, so the replicas' clocks do not matter): adds the carry (requests a replica allowed alone while
    /// it could not reach Redis) to the current window's count if it was counted in that very window, then grants
    /// as many of the permits wanted as the limit leaves. The count expires a minute after its window. Returns
    /// `{granted, count after, window index, milliseconds to the window's end}`.
    static let leaseScript = """
        if redis.replicate_commands then redis.replicate_commands() end
        local t = redis.call('TIME')
        local secs = tonumber(t[1])
        local ws = tonumber(ARGV[2])
        local w = math.floor(secs / ws)
        local key = KEYS[1] .. ':' .. string.format('%d', w)
        local used = tonumber(redis.call('GET', key) or '0')
        local carry = tonumber(ARGV[4])
        if carry > 0 and ARGV[5] == string.format('%d', w) then used = used + carry end
        local grant = math.max(0, math.min(tonumber(ARGV[3]), tonumber(ARGV[1]) - used))
        used = used + grant
        redis.call('SET', key, string.format('%d', used), 'EX', ws + 60)
        local left = (w + 1) * ws * 1000 - (secs * 1000 + math.floor(tonumber(t[2]) / 1000))
        return {grant, used, w, left}
        """

    /// KEYS: the limit's key base. ARGV: permits, window seconds, window index. Gives back permits a replica
    /// leased and did not spend, if their window is still the current one (never below zero). Returns how many.
    static let giveBackScript = """
        if redis.replicate_commands then redis.replicate_commands() end
        local t = redis.call('TIME')
        local w = math.floor(tonumber(t[1]) / tonumber(ARGV[2]))
        if string.format('%d', w) ~= ARGV[3] then return 0 end
        local key = KEYS[1] .. ':' .. ARGV[3]
        local used = tonumber(redis.call('GET', key) or '0')
        local n = math.min(tonumber(ARGV[1]), used)
        if n > 0 then redis.call('DECRBY', key, n) end
        return n
        """

    /// KEYS: lock. ARGV: lease, channel, notice. Compare-and-delete of a lock; publishes so waiters try at once.
    static let releaseScript = """
        if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
        redis.call('DEL', KEYS[1])
        redis.call('PUBLISH', ARGV[2], ARGV[3])
        return 1
        """

    /// KEYS: token, withdrawn mark. ARGV: digest prefix ("digest."), channel, notice, mark lifetime (ms). Marks the
    /// token withdrawn, then deletes it only if it is still the one with that digest (never a newer one) and
    /// publishes. 1 when deleted.
    static let withdrawScript = """
        redis.call('SET', KEYS[2], '1', 'PX', ARGV[4])
        local v = redis.call('GET', KEYS[1])
        if not v or string.sub(v, 1, string.len(ARGV[1])) ~= ARGV[1] then return 0 end
        redis.call('DEL', KEYS[1])
        redis.call('PUBLISH', ARGV[2], ARGV[3])
        return 1
        """
}
