/// One `[[client]]` entry: a user of the proxy, who authenticates with `Proxy-Authorization: Basic` and may be
/// limited to some credentials.
///
/// The password is never kept: only a random salt and SHA-256(salt ‖ password), compared in constant time.
public struct ProxyClient: Sendable {
    public let name: String
    /// Names of the credentials this client may use; nil: all of them.
    public let credentials: [String]?
    let salt: [UInt8]
    let digest: [UInt8]
    /// SHA-256 of the password under a key made once per process (``processKey``): equal across two loads of
    /// the configuration in this process exactly when the password is, so a reload can say that it changed.
    let fingerprint: [UInt8]

    public init(name: String, password: String, credentials: [String]?) {
        self.name = name
        self.credentials = credentials
        salt = Crypto.random(16)
        digest = Self.hash(password: Array(password.utf8), salt: salt)
        fingerprint = Self.hash(password: Array(password.utf8), salt: Self.processKey)
    }

    /// Random, made on first use, never stored or shown.
    private static let processKey = Crypto.random(32)

    static func hash(password: [UInt8], salt: [UInt8]) -> [UInt8] {
        Crypto.sha256(salt + password)
    }

    /// Whether `password` is this client's, in time independent of where the digests differ.
    func verify(password: [UInt8]) -> Bool {
        let d = Self.hash(password: password, salt: salt)
        var diff: UInt8 = 0
        for i in 0..<d.count { diff |= d[i] ^ digest[i] }
        return diff == 0
    }
}

/// Checks `Proxy-Authorization` against the configured ``ProxyClient``s.
public struct ProxyAuthenticator: Sendable {
    public let clients: [ProxyClient]
    private let byName: [String: Int]
    private let decoy = ProxyClient(name: "", password: "", credentials: nil)

    public init(_ clients: [ProxyClient]) {
        self.clients = clients
        var m: [String: Int] = [:]
        for (i, c) in clients.enumerated() { m[c.name] = i }
        byName = m
    }

    /// Whether requests need `Proxy-Authorization` at all.
    public var isRequired: Bool { !clients.isEmpty }

    /// The client a `Proxy-Authorization` value authenticates, or nil (missing, malformed, unknown user or
    /// wrong password: the caller answers 407 without saying which).
    public func authenticate(_ header: String?) -> ProxyClient? {
        guard let header, let (user, password) = Self.basicCredentials(header) else { return nil }
        guard let i = byName[user] else {
            // Hash anyway, so an unknown name takes as long as a wrong password (no user-name probing).
            _ = decoy.verify(password: password)
            return nil
        }
        let c = clients[i]
        return c.verify(password: password) ? c : nil
    }

    /// `Basic base64(user:password)` → user and password bytes (UTF-8).
    ///
    /// RFC 7617 leaves the charset to the client unless the challenge names one: curl and browsers send UTF-8,
    /// Python's requests/urllib3 send ISO-8859-1. Bytes that are not valid UTF-8 are read as ISO-8859-1 (where
    /// every byte is a character), so `pässwörd` verifies from either. Valid UTF-8 is taken as UTF-8: a Latin-1
    /// text of non-ASCII letters is practically never valid UTF-8.
    static func basicCredentials(_ header: String) -> (String, [UInt8])? {
        let (scheme, encoded) = header.authorizationScheme()
        guard scheme.caseInsensitiveEquals("basic"), !encoded.isEmpty, let decoded = Base64.decode(encoded) else {
            return nil
        }
        let raw = Self.utf8(decoded)
        guard let colon = raw.firstIndex(of: UInt8(ascii: ":")) else { return nil }
        return (String(decoding: raw[..<colon], as: UTF8.self), Array(raw[(colon + 1)...]))
    }

    /// `bytes` as UTF-8: unchanged when they are valid UTF-8, else read as ISO-8859-1.
    static func utf8(_ bytes: [UInt8]) -> [UInt8] {
        if bytes.allSatisfy({ $0 < 0x80 }) || String(validating: bytes, as: UTF8.self) != nil { return bytes }
        var s = String.UnicodeScalarView()
        for b in bytes { s.append(Unicode.Scalar(b)) }
        return Array(String(s).utf8)
    }
}

/// Standard base64 (RFC 4648 §4) decoding, padding required when the length is not a multiple of 4 is
/// tolerated; nil on any other character.
enum Base64 {
    static func decode(_ s: some StringProtocol) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(s.utf8.count * 3 / 4)
        var acc: UInt32 = 0
        var bits = 0
        var padding = 0
        for c in s.utf8 {
            let v: UInt32
            switch c {
            case 65...90: v = UInt32(c - 65)
            case 97...122: v = UInt32(c - 97 + 26)
            case 48...57: v = UInt32(c - 48 + 52)
            case 43: v = 62
            case 47: v = 63
            case 61:
                padding += 1
                continue
            default: return nil
            }
            if padding > 0 { return nil }  // data after '='
            acc = acc << 6 | v
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: acc >> UInt32(bits)))
            }
        }
        return padding <= 2 ? out : nil
    }
}
