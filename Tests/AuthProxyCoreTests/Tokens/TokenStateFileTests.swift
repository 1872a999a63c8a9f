#if canImport(Glibc)
import Glibc
#endif
import Testing

@testable import AuthProxyCore

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
            .init(key: "gis|http://h/arcgis", credential: "gis", fingerprint: "f1",
                token: IssuedToken(value: "SECRET-TOKEN-VALUE", expires: later, issued: nowMillis(), ssl: false, referer: nil)),
            .init(key: "old|http://h/arcgis", credential: "old", fingerprint: "f2",
                token: IssuedToken(value: "EXPIRED", expires: nowMillis() - 1000, issued: 0, ssl: false, referer: nil)),
        ]
        c.refreshTokens = [.init(credential: "me", fingerprint: "f3", refreshToken: "REFRESH-SECRET", expires: later, username: "alice")]
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

    @Test func sealAndOpen() {
        let key = Crypto.deriveKey(secret: "k", salt: Array("saltsaltsaltsalt".utf8), iterations: 1000)
        let sealed = Crypto.seal(Array("hello".utf8), key: key)!
        #expect(Crypto.open(sealed, key: key) == Array("hello".utf8))
        var tampered = sealed
        tampered[tampered.count - 1] ^= 1
        #expect(Crypto.open(tampered, key: key) == nil)
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
            guard case .absolute(let t)? = try? RequestHeadParser.parseTarget(method: "GET", s) else { return ("", false) }
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
