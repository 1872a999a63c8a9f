import Foundation

/// Tokens and OAuth refresh tokens saved under the state directory, so a restart does not cost a new token
/// and `authproxy login` can hand a refresh token to a running proxy.
///
/// The file is written atomically (temp file + rename) with mode 0600. With a `state_key` it is encrypted
/// with AES-256-GCM under a PBKDF2-derived key; without one it holds live tokens in clear (the README says so).
/// Every entry carries the SHA-256 of the credential that produced it: a changed credential never reuses it.
public struct TokenStateFile: Sendable {
    public struct StoredToken: Codable, Sendable, Equatable {
        public var key: String
        public var credential: String
        public var fingerprint: String
        public var token: IssuedToken
    }

    public struct StoredRefreshToken: Codable, Sendable, Equatable {
        public var credential: String
        public var fingerprint: String
        public var refreshToken: String
        /// Milliseconds since the epoch; nil: unknown.
        public var expires: Int64?
        public var username: String?
    }

    public struct Contents: Codable, Sendable, Equatable {
        public var version = 1
        public var tokens: [StoredToken] = []
        public var refreshTokens: [StoredRefreshToken] = []
        public init() {}
    }

    public let directory: String
    let secret: String?
    static let magic: [UInt8] = Array("APST1".utf8)

    public init(directory: String, secret: String?) {
        self.directory = directory
        self.secret = secret
    }

    public var path: String { directory + "/tokens" + (secret == nil ? ".json" : ".enc") }

    /// Reads the file; a missing file is empty state. Expired entries are dropped.
    public func load() throws(StateError) -> Contents {
        guard let data = FileManager.default.contents(atPath: path) else { return Contents() }
        var bytes = [UInt8](data)
        if let secret {
            guard bytes.starts(with: Self.magic), bytes.count > Self.magic.count + 16 else {
                throw StateError("\(path) is not an authproxy encrypted state file")
            }
            let salt = Array(bytes[Self.magic.count..<(Self.magic.count + 16)])
            let key = Crypto.deriveKey(secret: secret, salt: salt)
            guard let plain = Crypto.open(Array(bytes[(Self.magic.count + 16)...]), key: key) else {
                throw StateError("cannot decrypt \(path): wrong state_key or a damaged file")
            }
            bytes = plain
        }
        guard var c = try? JSONDecoder().decode(Contents.self, from: Data(bytes)) else {
            throw StateError("\(path) is not a valid state file")
        }
        let now = nowMillis()
        c.tokens.removeAll { $0.token.isExpired(at: now) }
        c.refreshTokens.removeAll { ($0.expires ?? .max) <= now }
        return c
    }

    /// Writes atomically with mode 0600, creating the directory (0700) if needed.
    public func save(_ contents: Contents) throws(StateError) {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
        } catch {
            throw StateError("cannot create state directory \(directory): \(error.localizedDescription)")
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        guard var bytes = try? [UInt8](encoder.encode(contents)) else { throw StateError("cannot encode state") }
        if let secret {
            let salt = Crypto.random(16)
            guard let sealed = Crypto.seal(bytes, key: Crypto.deriveKey(secret: secret, salt: salt)) else {
                throw StateError("cannot encrypt state")
            }
            bytes = Self.magic + salt + sealed
        }
        let tmp = "\(path).tmp.\(getpid())"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw StateError("cannot write \(tmp): \(lastErrorString())") }
        fchmod(fd, 0o600)
        var off = 0
        while off < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + off, $0.count - off) }
            if n < 0 {
                if errno == EINTR { continue }
                close(fd)
                unlink(tmp)
                throw StateError("cannot write \(tmp): \(lastErrorString())")
            }
            off += n
        }
        fsync(fd)
        close(fd)
        guard rename(tmp, path) == 0 else {
            unlink(tmp)
            throw StateError("cannot replace \(path): \(lastErrorString())")
        }
    }
}

public struct StateError: Error, Sendable, CustomStringConvertible {
    public let description: String
    init(_ d: String) { description = d }
}
