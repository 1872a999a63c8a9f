#if canImport(Glibc)
    import Glibc
#endif

/// Longest-prefix matching of `match` prefixes by lookup rather than by a scan, so that a site with thousands of
/// credentials (one per service) pays per request what a site with one pays.
///
/// The rule it carries out is ``MatchPrefix/matches(_:)`` with ``MatchPrefix/specificity``: a longer path always
/// wins (its weight dwarfs any host's), then an exact host over a wildcard, then the longer wildcard suffix; among
/// equal prefixes the one written first. So a lookup walks the request path's segment prefixes from the longest, and
/// at each one asks the exact host's bucket, then the buckets of the host's wildcard suffixes from the longest: the
/// first hit is the answer. A lookup costs one hash of the host (plus one per dot when wildcards exist) and one per
/// path depth that some prefix of the host has, whatever the number of credentials.
///
/// Keys are compared as bytes, as ``MatchPrefix/matches(_:)`` compares them (not as Unicode strings).
struct MatchIndex: Sendable {
    /// The prefixes of one scheme, port and host (or wildcard suffix): the first-written entry per path.
    private struct Bucket: Sendable {
        var paths: [ByteKey: Int] = [:]
        /// The path lengths present (bit n: some path of n bytes; paths of 64 bytes or more share bit 63), so a
        /// lookup only hashes the prefixes that can be there.
        var lengths: UInt64 = 0

        func has(length: Int) -> Bool { lengths & (1 << UInt64(min(length, 63))) != 0 }
    }

    private struct HostKey: Hashable, Sendable {
        var https: Bool
        var port: Int
        var host: ByteKey
    }

    private var exact: [HostKey: Bucket] = [:]
    private var wildcard: [HostKey: Bucket] = [:]

    /// `prefixes`: each credential's index and its prefixes. `pathless`: every prefix taken with its path dropped
    /// (matching on scheme, host and port only).
    init(_ prefixes: [(Int, [MatchPrefix])], pathless: Bool = false) {
        for (index, match) in prefixes {
            for p in match {
                guard p.scheme == "http" || p.scheme == "https" else { continue }
                let key = HostKey(https: p.scheme == "https", port: p.effectivePort, host: ByteKey(p.host))
                let path = pathless ? "" : p.path
                if p.wildcard {
                    Self.add(index, path: path, to: &wildcard[key, default: Bucket()])
                } else {
                    Self.add(index, path: path, to: &exact[key, default: Bucket()])
                }
            }
        }
    }

    private static func add(_ index: Int, path: String, to bucket: inout Bucket) {
        let key = ByteKey(path)
        // The first written wins a tie (the same prefix twice).
        if bucket.paths[key] == nil { bucket.paths[key] = index }
        bucket.lengths |= 1 << UInt64(min(path.utf8.count, 63))
    }

    var isEmpty: Bool { exact.isEmpty && wildcard.isEmpty }

    /// The index of the credential whose prefix matches `target` most specifically.
    func best(for target: URLTarget) -> Int? {
        guard !isEmpty else { return nil }
        let https: Bool
        switch target.scheme {
        case "https": https = true
        case "http": https = false
        default: return nil
        }
        var host = target.host
        var pathAndQuery = target.pathAndQuery
        return host.withUTF8 { h in
            pathAndQuery.withUTF8 { pq in
                best(
                    https: https, port: target.port, host: UnsafeRawBufferPointer(h),
                    pathAndQuery: UnsafeRawBufferPointer(pq))
            }
        }
    }

    private func best(https: Bool, port: Int, host: UnsafeRawBufferPointer, pathAndQuery: UnsafeRawBufferPointer)
        -> Int?
    {
        let own = exact[HostKey(https: https, port: port, host: ByteKey(probing: host))]
        var suffixes: [Bucket] = []
        if !wildcard.isEmpty {
            // `*.example.com` matches `a.example.com` and `a.b.example.com`, not `example.com`: the suffixes after
            // each dot, the longest first.
            for i in 0..<host.count where host[i] == UInt8(ascii: ".") && i + 1 < host.count {
                let rest = UnsafeRawBufferPointer(rebasing: host[(i + 1)...])
                if let b = wildcard[HostKey(https: https, port: port, host: ByteKey(probing: rest))] {
                    suffixes.append(b)
                }
            }
        }
        if own == nil && suffixes.isEmpty { return nil }
        // The path's segment prefixes, the longest first: the whole path (up to the query), then up to each `/`,
        // then "" (any path). A prefix never ends in `/`.
        var end = pathAndQuery.firstIndex(of: UInt8(ascii: "?")) ?? pathAndQuery.count
        while true {
            let candidate = ByteKey(probing: UnsafeRawBufferPointer(rebasing: pathAndQuery[0..<end]))
            if let own, own.has(length: end), let i = own.paths[candidate] { return i }
            for b in suffixes where b.has(length: end) {
                if let i = b.paths[candidate] { return i }
            }
            if end == 0 { return nil }
            var slash = end - 1
            while slash > 0, pathAndQuery[slash] != UInt8(ascii: "/") { slash -= 1 }
            end = slash
        }
    }
}

/// Bytes as a dictionary key, hashed and compared as bytes (as ``MatchPrefix/matches(_:)`` compares them, not as
/// Unicode strings). A stored key owns its bytes; a probe views the request's own bytes for one lookup, so a lookup
/// allocates nothing.
struct ByteKey: Hashable, @unchecked Sendable {
    private let stored: [UInt8]
    /// Set only on a probe, which never outlives the lookup it is made for (so never in a dictionary).
    private let probe: UnsafeRawBufferPointer?

    init(_ text: String) {
        stored = Array(text.utf8)
        probe = nil
    }

    init(probing bytes: UnsafeRawBufferPointer) {
        stored = []
        probe = bytes
    }

    private func withBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        if let probe { return body(probe) }
        return stored.withUnsafeBytes(body)
    }

    static func == (a: ByteKey, b: ByteKey) -> Bool {
        a.withBytes { x in
            b.withBytes { y in
                x.count == y.count && (x.count == 0 || memcmp(x.baseAddress!, y.baseAddress!, x.count) == 0)
            }
        }
    }

    func hash(into hasher: inout Hasher) {
        withBytes { hasher.combine(bytes: $0) }
    }
}
