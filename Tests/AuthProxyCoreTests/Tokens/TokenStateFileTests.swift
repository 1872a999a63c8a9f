import Testing

@testable import AuthProxyCore

#if canImport(Glibc)
    import Glibc
#endif

private func readBytes(_ path: String) -> [UInt8]? {
    guard let f = fopen(path, "rb") else { return nil }
    defer { fclose(f) }
    var out: [UInt8] = []
    var buf = [UInt8](repeating: 0, count: 4096)
    while true {
        let n = fread(&buf, 1, buf.count, f)
        if n == 0 { break }
        out += buf[0..<n]
    }
    return out
}

private func writeBytes(_ path: String, _ bytes: [UInt8]) {
    let f = fopen(path, "wb")!
    _ = fwrite(bytes, 1, bytes.count, f)
    fclose(f)
}

@Suite struct TokenStateFileTests {
    private func tempDir() -> String {
        var template = Array("/tmp/authproxy-state-XXXXXX".utf8CString)
        let p = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)) }
        return p
    }

    private func sample() -> TokenStateFile.Contents {
        var c = TokenStateFile.Contents()
        let later = nowMillis() + 3_600_000
        c.tokens = [
            .init(
                key: "gis|http://h/arcgis", credential: "gis", fingerprint: "f1",
                token: IssuedToken(
                    value: "SECRET-TOKEN-VALUE", expires: later, issued: nowMillis(), ssl: false, referer: nil)),
            .init(
                key: "old|http://h/arcgis", credential: "old", fingerprint: "f2",
                token: IssuedToken(value: "EXPIRED", expires: nowMillis() - 1000, issued: 0, ssl: false, referer: nil)),
        ]
        c.refreshTokens = [
            .init(
                credential: "me", fingerprint: "f3", refreshToken: "REFRESH-SECRET", expires: later, username: "alice")
        ]
        return c
    }

    @Test func plainRoundTripDropsExpired() throws {
        let dir = tempDir()
        let f = TokenStateFile(directory: dir, secret: nil)
        try f.save(sample())
        var st = stat()
        stat(f.path, &st)
        #expect(st.st_mode & 0o777 == 0o600)
        let back = try f.load()
        #expect(back.tokens.map(\.credential) == ["gis"])
        #expect(back.refreshTokens.first?.refreshToken == "REFRESH-SECRET")
    }

    @Test func encryptedFileHidesTokensAndNeedsTheKey() throws {
        let dir = tempDir()
        let f = TokenStateFile(directory: dir, secret: "correct horse battery staple")
        try f.save(sample())
        let raw = readTextFile(f.path) ?? ""
        #expect(!raw.contains("SECRET-TOKEN-VALUE"))
        #expect(!raw.contains("REFRESH-SECRET"))
        #expect(try f.load().tokens.count == 1)
        let wrong = TokenStateFile(directory: dir, secret: "another long secret value")
        #expect(throws: StateError.self) { try wrong.load() }
    }

    @Test func sealAndOpen() throws {
        let key = try #require(Crypto.deriveKey(secret: "k", salt: Array("saltsaltsaltsalt".utf8), iterations: 1000))
        let sealed = Crypto.seal(Array("hello".utf8), key: key)!
        #expect(Crypto.open(sealed, key: key) == Array("hello".utf8))
        var tampered = sealed
        tampered[tampered.count - 1] ^= 1
        #expect(Crypto.open(tampered, key: key) == nil)
    }

    /// PKCS5_PBKDF2_HMAC's result was ignored: a refused derivation gave an all-zero key.
    @Test func refusedKeyDerivationIsAnError() {
        #expect(Crypto.deriveKey(secret: "k", salt: Array("saltsaltsaltsalt".utf8), iterations: 0) == nil)
        #expect(Crypto.sha256(Array("abc".utf8)).prefix(4) == [0xba, 0x78, 0x16, 0xbf])
    }

    @Test func wrongKeyIsToldApartFromDamage() throws {
        let dir = tempDir()
        let f = TokenStateFile(directory: dir, secret: "correct horse battery staple")
        try f.save(sample())
        let original = try #require(readBytes(f.path))
        let wrong = TokenStateFile(directory: dir, secret: "another long secret value")
        let e1 = #expect(throws: StateError.self) { try wrong.load() }
        #expect(e1?.kind == .wrongKey)
        #expect(e1?.description == "state_key does not decrypt \(f.path)")
        // A wrong key never leads to a write: update refuses and the bytes stay.
        #expect(throws: StateError.self) { try wrong.update { $0.refreshTokens = [] } }
        #expect(readBytes(f.path) == original)
        // One flipped bit in the box (right key): damage, renamed aside by update, never overwritten in place.
        var damaged = original
        damaged[damaged.count - 1] ^= 1
        writeBytes(f.path, damaged)
        let e2 = #expect(throws: StateError.self) { try f.load() }
        #expect(e2?.kind == .damaged)
        let r = try f.update { $0.refreshTokens = [] }
        let aside = try #require(r.quarantined)
        #expect(aside.hasPrefix(f.path + ".corrupt-"))
        #expect(readBytes(aside) == damaged)
        #expect(try f.load().tokens.isEmpty)
        // Not a state file at all.
        writeBytes(f.path, Array("garbage".utf8))
        #expect((#expect(throws: StateError.self) { try f.load() })?.kind == .damaged)
        let plain = TokenStateFile(directory: tempDir(), secret: nil)
        writeBytes(plain.path, Array("{not json".utf8))
        #expect((#expect(throws: StateError.self) { try plain.load() })?.kind == .damaged)
    }

    @Test func firstFormatStillReads() throws {
        // APST1 files (no key check value) written before: readable with the key, "wrong key" without.
        let dir = tempDir()
        let f = TokenStateFile(directory: dir, secret: "correct horse battery staple")
        let bytes = try f.encode(sample())
        let salt = Array(bytes[5..<21])
        let box = Array(bytes[37...])
        writeBytes(f.path, TokenStateFile.magicV1 + salt + box)
        #expect(try f.load().tokens.count == 1)
        let wrong = TokenStateFile(directory: dir, secret: "another long secret value")
        #expect((#expect(throws: StateError.self) { try wrong.load() })?.kind == .wrongKey)
    }

    @Test func updateIsSerialisedByTheLock() async throws {
        let dir = tempDir()
        let f = TokenStateFile(directory: dir, secret: nil)
        try f.save(TokenStateFile.Contents())
        // Many concurrent read-modify-writes, each adding one entry: none may be lost.
        await withTaskGroup(of: Void.self) { group in
            for i in 0..<40 {
                group.addTask {
                    _ = try? f.update { c in
                        c.refreshTokens.append(
                            .init(credential: "c\(i)", fingerprint: "f", refreshToken: "r", expires: nil, username: nil)
                        )
                    }
                }
            }
        }
        #expect(try f.load().refreshTokens.count == 40)
    }

    @Test func refreshMargin() {
        let t = IssuedToken(value: "v", expires: 100_000, issued: 0, ssl: false, referer: nil)
        #expect(t.refreshMargin == 10_000)  // 10% of a 100 s lifetime
        let long = IssuedToken(value: "v", expires: 7_200_000, issued: 0, ssl: false, referer: nil)
        #expect(long.refreshMargin == 300_000)  // capped at 5 minutes
        #expect(!t.needsRefresh(at: 89_999))
        #expect(t.needsRefresh(at: 90_000))
        #expect(!t.isExpired(at: 99_999))
    }

    @Test func serverRoots() {
        func root(_ s: String) -> (String, Bool) {
            guard case .absolute(let t)? = try? RequestHeadParser.parseTarget(method: "GET", s) else {
                return ("", false)
            }
            let r = ServerRoot.of(t)
            return (r.root, r.isPortal)
        }
        #expect(root("https://h/arcgis/rest/services/A/FeatureServer/0/query?f=json") == ("https://h/arcgis", false))
        #expect(root("https://h:8443/server/rest/info") == ("https://h:8443/server", false))
        #expect(root("https://h/portal/sharing/rest/portals/self") == ("https://h/portal", true))
        #expect(root("https://www.arcgis.com/sharing/rest/content") == ("https://www.arcgis.com", true))
        #expect(ServerRoot.same("https://H/portal/", "https://h:443/portal"))
    }
}
