import Foundation

/// Tokens and OAuth refresh tokens saved under the state directory, so a restart does not cost a new token
/// and `authproxy login` can hand a refresh token to a running proxy.
///
/// Rules (docs/credentials.md, "Token state file", repeats them):
/// - Written atomically (temp file + rename) with mode 0600. With a `state_key` it is encrypted with
///   AES-256-GCM under a PBKDF2-derived key, and carries a key check value so a wrong key is told apart from
///   a damaged file; without one it holds live tokens in clear.
/// - A file that cannot be read is never overwritten: a wrong `state_key` (or an unreadable file) is an error
///   the caller must stop on; a damaged file is renamed aside (``quarantine()``) before anything new is
///   written.
/// - Writers (`serve`, `login`, `signout`) hold an exclusive `flock` on `tokens.lock` around
///   read-modify-write (``update(_:)``), so one process never undoes another's change.
/// - Every entry carries the SHA-256 of the credential that produced it: a changed credential never reuses it.
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
        /// When it was issued (milliseconds since the epoch), so the exchange margin can be a share of its life
        /// (``SignInRenewal``); nil: unknown (saved by an earlier version).
        public var issued: Int64? = nil
        /// The sign-in this refresh token continues, when it came from an exchange (`exchange_refresh_token`, a
        /// provider's rotation): the ``signIn`` of the refresh token it replaced. nil: it is the sign-in's first.
        public var grant: String? = nil

        /// What names the sign-in (an `authproxy login`): its first refresh token's digest, kept through every
        /// exchange. Access tokens, shared fleet slots and the state file's tokens belong to a sign-in, not to one
        /// refresh token: an exchange keeps them, a new login (a new first refresh token) drops them.
        public var signIn: String { grant ?? Self.signIn(of: refreshToken) }

        static func signIn(of firstRefreshToken: String) -> String {
            Crypto.sha256Hex("authproxy grant\u{0}" + firstRefreshToken)
        }
    }

    public struct Contents: Codable, Sendable, Equatable {
        public var version = 1
        public var tokens: [StoredToken] = []
        public var refreshTokens: [StoredRefreshToken] = []
        public init() {}
    }

    /// Identifies one version of the file on disk (every save is a rename, so a new inode): a running
    /// proxy compares stamps to notice another process's change.
    public struct Stamp: Sendable, Equatable {
        var device: UInt64
        var inode: UInt64
        var size: Int64
        var modified: Int64
    }

    public let directory: String
    let secret: String?
    /// What "expired" means when reading: tokens and refresh tokens past their expiry are left out.
    let clock: any WallClock
    /// Current format: magic, 16-byte salt, 16-byte key check value, then the AES-GCM box.
    static let magic: [UInt8] = Array("APST2".utf8)
    /// The first format, without a key check value (still read).
    static let magicV1: [UInt8] = Array("APST1".utf8)
    static let saltLength = 16
    static let checkLength = 16

    public init(directory: String, secret: String?, clock: any WallClock = SystemWallClock()) {
        self.directory = directory
        self.secret = secret
        self.clock = clock
    }

    public var path: String { directory + "/tokens" + (secret == nil ? ".json" : ".enc") }
    public var lockPath: String { directory + "/tokens.lock" }

    /// Reads the file; a missing file is empty state. Expired entries are dropped.
    ///
    /// Throws ``StateError`` with kind `.wrongKey` (the `state_key` does not open it), `.damaged` (not a
    /// state file, or altered) or `.unreadable`. None of them may be answered by overwriting the file.
    public func load() throws(StateError) -> Contents {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT { return Contents() }
            throw StateError("cannot read \(path): \(lastErrorString())", kind: .unreadable)
        }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress!, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                let message = lastErrorString()
                close(fd)
                throw StateError("cannot read \(path): \(message)", kind: .unreadable)
            }
            if n == 0 { break }
            bytes.append(contentsOf: chunk[0..<n])
        }
        close(fd)
        return try decode(bytes)
    }

    /// The bytes of a state file → its contents (see ``load()`` for the errors).
    func decode(_ raw: [UInt8]) throws(StateError) -> Contents {
        var bytes = raw
        if let secret {
            let v2 = bytes.starts(with: Self.magic)
            guard v2 || bytes.starts(with: Self.magicV1) else {
                throw StateError("\(path) is not an authproxy encrypted state file", kind: .damaged)
            }
            let header = Self.magic.count + Self.saltLength + (v2 ? Self.checkLength : 0)
            guard bytes.count >= header + 28 else {
                throw StateError("\(path) is truncated", kind: .damaged)
            }
            let salt = Array(bytes[Self.magic.count..<(Self.magic.count + Self.saltLength)])
            guard let key = Crypto.deriveKey(secret: secret, salt: salt) else {
                throw StateError("cannot derive the state key (PBKDF2 failed in libcrypto)", kind: .unreadable)
            }
            if v2 {
                let stored = Array(bytes[(Self.magic.count + Self.saltLength)..<header])
                guard stored == Self.checkValue(key) else {
                    throw StateError("state_key does not decrypt \(path)", kind: .wrongKey)
                }
            }
            guard let plain = Crypto.open(Array(bytes[header...]), key: key) else {
                // With a matching check value the key is right, so the box was altered. A version 1 file has
                // no check value: the key is the likelier cause, and either way the file must be kept.
                if v2 { throw StateError("\(path) is damaged (authentication failed)", kind: .damaged) }
                throw StateError("state_key does not decrypt \(path) (or the file is damaged)", kind: .wrongKey)
            }
            bytes = plain
        }
        guard var c = try? JSONDecoder().decode(Contents.self, from: Data(bytes)) else {
            throw StateError("\(path) is not a valid state file", kind: .damaged)
        }
        let now = clock.nowMillis()
        c.tokens.removeAll { $0.token.isExpired(at: now) }
        c.refreshTokens.removeAll { ($0.expires ?? .max) <= now }
        return c
    }

    /// 16 bytes that show whether a derived key is the one the file was written with, without decrypting:
    /// a wrong `state_key` is reported as such instead of as damage.
    static func checkValue(_ key: [UInt8]) -> [UInt8] {
        Array(Crypto.sha256(key + Array("authproxy state key check".utf8)).prefix(checkLength))
    }

    /// The file's bytes for `contents`.
    func encode(_ contents: Contents) throws(StateError) -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        guard let bytes = try? [UInt8](encoder.encode(contents)) else { throw StateError("cannot encode state") }
        guard let secret else { return bytes }
        let salt = Crypto.random(Self.saltLength)
        guard let key = Crypto.deriveKey(secret: secret, salt: salt), let sealed = Crypto.seal(bytes, key: key) else {
            throw StateError("cannot encrypt state")
        }
        return Self.magic + salt + Self.checkValue(key) + sealed
    }

    /// Writes atomically with mode 0600, creating the directory (0700) if needed. Callers that read first
    /// use ``update(_:)`` instead, which holds the lock and never overwrites an unreadable file.
    public func save(_ contents: Contents) throws(StateError) {
        try makeDirectory()
        let bytes = try encode(contents)
        let tmp = "\(path).tmp.\(getpid())"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw StateError("cannot write \(tmp): \(lastErrorString())") }
        fchmod(fd, 0o600)
        var off = 0
        while off < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + off, $0.count - off) }
            if n < 0 {
                if errno == EINTR { continue }
                let message = lastErrorString()
                close(fd)
                unlink(tmp)
                throw StateError("cannot write \(tmp): \(message)")
            }
            off += n
        }
        fsync(fd)
        close(fd)
        guard rename(tmp, path) == 0 else {
            let message = lastErrorString()
            unlink(tmp)
            throw StateError("cannot replace \(path): \(message)")
        }
    }

    /// Why tokens could not be saved in ``directory`` (it, or its nearest existing ancestor that it would be
    /// created in, is not writable by this process); nil when they can. Creates nothing (for `authproxy check`).
    public func unwritableReason() -> String? {
        var dir = directory.isEmpty ? "." : directory
        while true {
            var st = stat()
            if stat(dir, &st) == 0 {
                guard (st.st_mode & S_IFMT) == S_IFDIR else { return "\(dir) is not a directory" }
                if access(dir, W_OK | X_OK) != 0 {
                    return dir == directory
                        ? "not writable (\(lastErrorString()))"
                        : "cannot be created in \(dir) (\(lastErrorString()))"
                }
                return nil
            }
            guard let slash = dir.lastIndex(of: "/") else { dir = "."; continue }
            dir = slash == dir.startIndex ? "/" : String(dir[..<slash])
        }
    }

    private func makeDirectory() throws(StateError) {
        do {
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
        } catch {
            throw StateError("cannot create state directory \(directory): \(error.localizedDescription)")
        }
    }

    /// Runs `body` holding an exclusive `flock` on ``lockPath`` (blocking until other writers are done).
    public func withLock<T>(_ body: () throws(StateError) -> T) throws(StateError) -> T {
        try makeDirectory()
        let fd = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw StateError("cannot open \(lockPath): \(lastErrorString())", kind: .unreadable) }
        defer { close(fd) }  // closing releases the lock
        while flock(fd, LOCK_EX) != 0 {
            if errno == EINTR { continue }
            throw StateError("cannot lock \(lockPath): \(lastErrorString())", kind: .unreadable)
        }
        return try body()
    }

    /// What ``update(_:)`` did.
    public struct UpdateResult: Sendable {
        /// The contents now on disk.
        public var contents: Contents
        /// Where a damaged file was moved to, if one was.
        public var quarantined: String?
        /// The stamp of the file just written.
        public var stamp: Stamp?
    }

    /// Read-modify-write under the lock. A damaged file is renamed aside first (the caller should warn with
    /// ``UpdateResult/quarantined``); a wrong key or an unreadable file throws and nothing is written.
    @discardableResult
    public func update(_ body: (inout Contents) throws(StateError) -> Void) throws(StateError) -> UpdateResult {
        try withLock { () throws(StateError) -> UpdateResult in
            var quarantined: String? = nil
            var contents: Contents
            do throws(StateError) {
                contents = try load()
            } catch  where error.kind == .damaged {
                quarantined = try quarantine()
                contents = Contents()
            }
            try body(&contents)
            try save(contents)
            return UpdateResult(contents: contents, quarantined: quarantined, stamp: stamp())
        }
    }

    /// Renames a damaged file to `tokens.<ext>.corrupt-<UTC timestamp>` (kept for inspection, never deleted)
    /// and returns the new name.
    public func quarantine() throws(StateError) -> String {
        var now = time(nil)
        var tm = tm()
        gmtime_r(&now, &tm)
        let stamp = String(
            format: "%04d%02d%02dT%02d%02d%02dZ", Int(tm.tm_year) + 1900, Int(tm.tm_mon) + 1,
            Int(tm.tm_mday), Int(tm.tm_hour), Int(tm.tm_min), Int(tm.tm_sec))
        var target = "\(path).corrupt-\(stamp)"
        var n = 1
        while access(target, F_OK) == 0 {
            n += 1
            target = "\(path).corrupt-\(stamp)-\(n)"
        }
        guard rename(path, target) == 0 else {
            throw StateError("cannot rename the damaged \(path) aside: \(lastErrorString())", kind: .unreadable)
        }
        return target
    }

    /// The stamp of the file on disk, nil when there is none.
    public func stamp() -> Stamp? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return Stamp(
            device: UInt64(st.st_dev), inode: UInt64(st.st_ino), size: Int64(st.st_size),
            modified: Int64(st.st_mtim.tv_sec) * 1_000_000_000 + Int64(st.st_mtim.tv_nsec))
    }
}

/// A token state file problem. `kind` tells a caller whether it may go on (never by overwriting an unreadable
/// file); the description names the file and the cause, never a token.
public struct StateError: Error, Sendable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// The configured `state_key` does not open the file.
        case wrongKey
        /// Not a state file, or altered: rename it aside, never overwrite it.
        case damaged
        /// The file (or its lock) cannot be read: permissions, I/O.
        case unreadable
        case other
    }

    public let description: String
    public let kind: Kind
    init(_ d: String, kind: Kind = .other) {
        description = d
        self.kind = kind
    }
}
