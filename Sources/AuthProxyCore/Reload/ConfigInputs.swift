/// What a loaded configuration was made of: the configuration file's text and every `file:` secret it named,
/// each as a SHA-256 digest of the contents read. Live reload compares these (not modification times, which a
/// Kubernetes symlink swap or a `touch` change without changing anything) to decide whether a change of the
/// files on disk is worth a reload, and watches the directories they are in.
///
/// Never holds a secret: only paths and digests.
public struct ConfigInputs: Sendable, Equatable {
    /// The configuration file, as given on the command line.
    public var configPath: String
    /// SHA-256 (hex) of the configuration text.
    public var configDigest: String
    /// Each `file:` secret's path, as written in the configuration, with the SHA-256 (hex) of its contents.
    public var secretDigests: [String: String]

    /// Stands for a file that could not be read (deleted, or mid-swap): differs from every real digest.
    static let unreadable = "unreadable"

    public init(configPath: String, configDigest: String, secretDigests: [String: String]) {
        self.configPath = configPath
        self.configDigest = configDigest
        self.secretDigests = secretDigests
    }

    init(configPath: String, configText: String, secretFiles: [(path: String, contents: String)]) {
        var digests: [String: String] = [:]
        for f in secretFiles { digests[f.path] = Crypto.sha256Hex(f.contents) }
        self.init(configPath: configPath, configDigest: Crypto.sha256Hex(configText), secretDigests: digests)
    }

    /// The same inputs as they are on disk now, read with `read` (nil: unreadable). A secret the new
    /// configuration would add is not known here, but naming it means changing the configuration text, whose
    /// digest then differs.
    func reread(with read: (String) -> String?) -> ConfigInputs {
        var digests: [String: String] = [:]
        for path in secretDigests.keys { digests[path] = read(path).map(Crypto.sha256Hex) ?? Self.unreadable }
        return ConfigInputs(
            configPath: configPath, configDigest: read(configPath).map(Crypto.sha256Hex) ?? Self.unreadable,
            secretDigests: digests)
    }

    /// Every path whose directory is watched: the configuration file and each secret.
    var paths: [String] { [configPath] + secretDigests.keys.sorted() }
}
