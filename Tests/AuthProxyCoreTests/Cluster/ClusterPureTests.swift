import Testing

@testable import AuthProxyCore

/// The parts of `[cluster]` without I/O: the RESP codec (hiredis), the Redis URL, key names and sealing, the
/// health state machine, the configuration and readiness.
@Suite struct ClusterPureTests {
    // MARK: - RESP through hiredis

    @Test func commandsAreFormattedAsRESPArraysOfBulkStrings() {
        let bytes = RESPCodec.format(["SET", "k", "a b\r\n", "NX"])
        #expect(String(decoding: bytes, as: UTF8.self) == "*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\na b\r\n\r\n$2\r\nNX\r\n")
        // Binary and empty arguments are kept as they are.
        #expect(
            RESPCodec.format([[0, 255], []]) == Array("*2\r\n$2\r\n".utf8) + [0, 255] + Array("\r\n$0\r\n\r\n".utf8))
    }

    @Test func repliesAreParsedWhateverPiecesTheyArriveIn() throws {
        let codec = RESPCodec()
        let wire = Array(
            "+OK\r\n$-1\r\n:42\r\n-WRONGPASS invalid\r\n*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$3\r\nt x\r\n".utf8)
        var replies: [RedisReply] = []
        for b in wire {  // one byte at a time: a reply split anywhere must come out whole
            try codec.feed([b])
            while let r = try codec.next() { replies.append(r) }
        }
        #expect(
            replies == [
                .status("OK"), .null, .integer(42), .error("WRONGPASS invalid"),
                .array([.string(Array("message".utf8)), .string(Array("ch".utf8)), .string(Array("t x".utf8))]),
            ])
    }

    @Test func aByteStreamThatIsNotRESPIsAProtocolError() throws {
        let codec = RESPCodec()
        try codec.feed(Array("HTTP/1.1 400 Bad Request\r\n".utf8))
        #expect(throws: RedisError.self) { _ = try codec.next() }
    }

    @Test func errorRepliesAreClassifiedByTheirCode() {
        #expect(RedisError.reply("WRONGPASS invalid username-password pair", command: "AUTH").kind == .authentication)
        #expect(RedisError.reply("NOAUTH Authentication required.", command: "GET").kind == .authentication)
        #expect(
            RedisError.reply("READONLY You can't write against a read only replica.", command: "SET").kind == .readOnly)
        let moved = RedisError.reply("MOVED 3999 127.0.0.1:6381", command: "GET")
        #expect(moved.kind == .clusterMode && moved.message.contains("cluster mode is not supported"))
        #expect(RedisError.reply("ERR unknown command", command: "X").kind == .server)
    }

    // MARK: - the URL

    @Test func redisURLs() throws {
        let a = try RedisEndpoint.parse("redis://redis.internal:6380/2").get()
        #expect(
            a.host == "redis.internal" && a.port == 6380 && a.database == 2 && a.user == nil && a.password == nil
                && a.tls == nil)
        let b = try RedisEndpoint.parse("rediss://proxy:p%40ss%3Aw@[::1]/0").get()
        #expect(b.host == "::1" && b.port == 6379 && b.user == "proxy" && b.password == "p@ss:w" && b.tls != nil)
        #expect(b.redacted == "rediss://[::1]:6379/0")
        let c = try RedisEndpoint.parse("redis://:secret@127.0.0.1").get()
        #expect(c.user == nil && c.password == "secret")
        for bad in ["http://h:6379", "redis://", "redis://h:0", "redis://h:6379/x", "redis://u:%zz@h", "redis://[::1"] {
            guard case .failure(let p) = RedisEndpoint.parse(bad) else {
                Issue.record("\(bad) should be refused")
                continue
            }
            #expect(!p.message.contains("zz"))
        }
    }

    // MARK: - names and sealing

    static let keys = ClusterKeys(stateKey: "0123456789abcdef-state", prefix: "authproxy:")!
    static let slot = TokenSlot(
        key: "gis|https://gis.example.com/arcgis", credential: "gis", fingerprint: "f1", grant: nil)

    @Test func namesHideTheCredentialAndRootAndDependOnTheStateKey() {
        let n = Self.keys.name(Self.slot)
        #expect(n.count == 64 && !n.contains("gis"))
        var other = Self.slot
        other.fingerprint = "f2"
        #expect(Self.keys.name(other) != n)
        other = Self.slot
        other.grant = "g"
        #expect(Self.keys.name(other) != n)
        let elsewhere = ClusterKeys(stateKey: "another-state-key-0000", prefix: "authproxy:")!
        #expect(elsewhere.name(Self.slot) != n)
    }

    @Test func sealedTokensOpenOnlyUnderTheirOwnKeyNameAndStateKey() throws {
        let t = IssuedToken(
            value: "TOKEN-VALUE", expires: 1_700_000_600_000, issued: 1_700_000_000_000, ssl: true, referer: "r")
        let key = Self.keys.tokenKey(Self.keys.name(Self.slot))
        let sealed = try #require(Self.keys.seal(t, under: key))
        #expect(!sealed.contains("TOKEN-VALUE"))
        #expect(sealed.hasPrefix(Self.keys.digest("TOKEN-VALUE") + "."))
        #expect(Self.keys.open(Array(sealed.utf8), under: key) == t)
        // Moved under another name, or read with another state_key: does not open.
        #expect(Self.keys.open(Array(sealed.utf8), under: key + "x") == nil)
        let elsewhere = ClusterKeys(stateKey: "another-state-key-0000", prefix: "authproxy:")!
        #expect(elsewhere.open(Array(sealed.utf8), under: key) == nil)
    }

    @Test func noticesRoundTrip() {
        for n: ClusterKeys.Notice in [.written("ab"), .unlocked("cd"), .withdrawn("ef", digest: "01"), .signIn] {
            #expect(ClusterKeys.Notice.parse(n.text) == n)
        }
        #expect(ClusterKeys.Notice.parse("x y") == nil)
    }

    // MARK: - health

    @Test func healthLogsOncePerChangeAndBacksOff() {
        var h = ClusterHealth()
        let down = RedisError(.unreachable, "connection refused")
        #expect(h.mayTry(at: 0))
        var news = h.failed(down, at: 0)
        #expect(news)
        #expect(!h.mayTry(at: 500))
        #expect(h.mayTry(at: 1000))
        news = h.failed(down, at: 1000)
        #expect(!news)  // same cause: no new line
        #expect(!h.mayTry(at: 2500))  // 2 s now
        news = h.failed(RedisError(.authentication, "WRONGPASS"), at: 3000)
        #expect(news)  // another cause: a line
        news = h.succeeded()
        #expect(news)
        news = h.succeeded()
        #expect(!news)
        #expect(h.mayTry(at: 3001))
    }

    // MARK: - configuration and readiness

    static func parse(_ text: String) throws(ConfigError) -> ProxyConfig {
        try ConfigLoader(environment: ["REDIS_URL": "redis://:pw@10.0.0.5:6379/1"]).parse(text)
    }

    @Test func clusterSettings() throws {
        let c = try Self.parse(
            """
            [proxy]
            state_key = "0123456789abcdef0"
            [cluster]
            redis = "${REDIS_URL}"
            key_prefix = "gis-fleet:"
            timeout_ms = 150
            required = true
            lock_wait_seconds = 12
            """)
        let cluster = try #require(c.cluster)
        #expect(cluster.lockWaitSeconds == 12)
        #expect(
            cluster.endpoint.host == "10.0.0.5" && cluster.endpoint.password == "pw" && cluster.endpoint.database == 1)
        #expect(cluster.keyPrefix == "gis-fleet:" && cluster.timeoutMillis == 150 && cluster.required)
        let d = try #require(
            try Self.parse("[proxy]\nstate_key = \"0123456789abcdef0\"\n[cluster]\nredis = \"redis://r:6379\"\n")
                .cluster)
        #expect(d.keyPrefix == "authproxy:" && d.timeoutMillis == 200 && !d.required)
        // A squatted lock delays a token need by this wait, not by the token request timeout (60 s by default).
        #expect(d.lockWaitSeconds == 5)
        for bad in ["0", "601", "\"5\""] {
            #expect(throws: ConfigError.self) {
                try Self.parse(
                    "[proxy]\nstate_key = \"0123456789abcdef0\"\n[cluster]\nredis = \"redis://r:6379\"\nlock_wait_seconds = \(bad)\n"
                )
            }
        }
        let tls = try #require(
            try Self.parse(
                """
                [proxy]
                state_key = "0123456789abcdef0"
                [cluster]
                redis = "rediss://r:6380"
                ca = "/etc/ca.pem"
                """
            ).cluster)
        #expect(tls.endpoint.tls == RedisEndpoint.TLS(ca: "/etc/ca.pem"))
    }

    @Test func clusterMistakesAreConfigErrorsThatNeverQuoteTheURL() {
        func error(_ text: String) -> ConfigError? {
            do { _ = try Self.parse(text); return nil } catch { return error }
        }
        let noKey = error("[cluster]\nredis = \"redis://r:6379\"\n")
        #expect(noKey?.key == "proxy.state_key")
        let bad = error("[proxy]\nstate_key = \"0123456789abcdef0\"\n[cluster]\nredis = \"http://u:hunter2@r\"\n")
        #expect(bad?.key == "cluster.redis")
        #expect(!(bad.map { "\($0)" } ?? "").contains("hunter2"))
        #expect(
            error("[proxy]\nstate_key = \"0123456789abcdef0\"\n[cluster]\nredis = \"redis://r\"\nca = \"/ca.pem\"\n")?
                .key == "cluster.ca")
        #expect(error("[proxy]\nstate_key = \"0123456789abcdef0\"\n[cluster]\n")?.key == "cluster.redis")
    }

    @Test func aReplicaWithoutRedisIsNotReadyOnlyWhenRequired() {
        var s = ClusterStatus(redis: "redis://r:6379/0", required: false)
        s.problem = "connection refused"
        let free = Readiness.evaluate(listeners: [], shuttingDown: false, prefetch: [], cluster: s) { _ in nil }
        #expect(free.ready)
        s.required = true
        let required = Readiness.evaluate(listeners: [], shuttingDown: false, prefetch: [], cluster: s) { _ in nil }
        #expect(!required.ready && required.reasons.first?.contains("connection refused") == true)
        s.connected = true
        #expect(Readiness.evaluate(listeners: [], shuttingDown: false, prefetch: [], cluster: s) { _ in nil }.ready)
    }
}
