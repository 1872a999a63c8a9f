/// The files of the running configuration's `certificate` credentials (PKCS#12 `file`, or PEM `cert` and `key`)
/// and `server-trust` CA bundles (`ca_file`), each with the SHA-256 of its contents as last seen: what the
/// certificate watcher follows, always (not only with `watch_config`), so a certificate renewed on disk
/// (cert-manager, a yearly PKI renewal) is taken for new connections without a reload (``CertificateRenewal``).
///
/// Never holds the contents: only paths and digests.
struct CertificateFiles: WatchedFiles {
    /// SHA-256 (hex) of each file's contents by path; ``ConfigInputs/unreadable`` for a file that could not be read.
    var digests: [String: String]

    init(digests: [String: String]) { self.digests = digests }

    /// The certificate files `credentials` name, with the digests of the contents they run with (read when they
    /// were loaded), so a change made after the load and before the watch began is still a change; a file whose
    /// contents are not kept is read with `read`.
    init(running credentials: [Credential], read: (String) -> [UInt8]? = readFileBytes) {
        var d: [String: String] = [:]
        for c in credentials {
            if let s = c.kind as? ClientCertificateSettings {
                if let m = s.material {
                    if let file = s.file { d[file] = Self.digest(m.cert) }
                    if let cert = s.cert { d[cert] = Self.digest(m.cert) }
                    if let key = s.key, let k = m.key { d[key] = Self.digest(k) }
                }
            } else if let t = c.kind as? ServerTrustSettings {
                if let ca = t.caFile, let bundle = t.caBundle { d[ca] = Self.digest(bundle) }
            }
        }
        for path in Self.paths(of: credentials) where d[path] == nil { d[path] = Self.digest(read(path)) }
        digests = d
    }

    /// The paths whose digest differs in `other` (or that only one of the two has).
    func changed(comparedTo other: CertificateFiles) -> Set<String> {
        Set(digests.keys).union(other.digests.keys).filter { digests[$0] != other.digests[$0] }
    }

    /// The certificate and CA files of `credentials`, as configured.
    static func paths(of credentials: [Credential]) -> Set<String> {
        var out = Set<String>()
        for c in credentials {
            if let s = c.kind as? ClientCertificateSettings {
                for p in [s.file, s.cert, s.key].compactMap({ $0 }) { out.insert(p) }
            } else if let ca = (c.kind as? ServerTrustSettings)?.caFile {
                out.insert(ca)
            }
        }
        return out
    }

    static func digest(_ bytes: [UInt8]?) -> String {
        bytes.map { Crypto.hex(Crypto.sha256($0)) } ?? ConfigInputs.unreadable
    }

    var isEmpty: Bool { digests.isEmpty }

    var paths: [String] { digests.keys.sorted() }

    func rereadFromDisk() -> CertificateFiles {
        var d: [String: String] = [:]
        for path in digests.keys { d[path] = Self.digest(readFileBytes(path)) }
        return CertificateFiles(digests: d)
    }
}
