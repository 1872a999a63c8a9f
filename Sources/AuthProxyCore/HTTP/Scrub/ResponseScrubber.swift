/// Masks secrets in a response body as it streams past: every occurrence of each secret, in every form
/// ``EncodedTokenFinder`` knows (as is, percent-encoded once or twice, HTML/XML character references and entities,
/// JSON escapes), becomes as many `*` as it had bytes, so a `Content-Length` stays true.
///
/// Memory is bounded: a secret can be split across two reads, so the scrubber holds back the last
/// ``holdBack`` bytes of what it has seen (the longest encoded form of the longest secret, minus one byte) and
/// decides them with the next read or at ``finish(emit:)``. What it emits is exactly what one scan over the whole
/// body would produce: a position is decided only once every byte a match starting there could need has arrived.
///
/// Pure: bytes in, bytes out, no I/O. One per response (``BodyScrub``).
struct ResponseScrubber {
    private let finders: [EncodedTokenFinder]
    /// At most this many bytes are held between reads.
    let holdBack: Int
    /// The undecided tail of the previous read, then the new read appended to it.
    private var pending: [UInt8] = []

    /// nil when no secret is non-empty (nothing to mask).
    init?(secrets: [String]) {
        var seen = Set<String>()
        let finders = secrets.filter { seen.insert($0).inserted }.compactMap(EncodedTokenFinder.init)
        guard !finders.isEmpty else { return nil }
        self.finders = finders
        holdBack = finders.map(\.maxEncodedLength).max()! - 1
    }

    /// Bytes held back now (never more than ``holdBack``).
    var heldCount: Int { pending.count }

    /// Scrubs `bytes`, which follow what was fed before, and gives `emit` what is decided (nothing when every byte
    /// is still held back; `emit` is then not called).
    mutating func feed(_ bytes: UnsafeRawBufferPointer, emit: (UnsafeRawBufferPointer) -> Void) {
        guard !bytes.isEmpty else { return }
        pending.append(contentsOf: bytes)
        scrub(final: false, emit: emit)
    }

    /// The end of the body: what is held back is decided and emitted.
    mutating func finish(emit: (UnsafeRawBufferPointer) -> Void) {
        scrub(final: true, emit: emit)
    }

    private mutating func scrub(final: Bool, emit: (UnsafeRawBufferPointer) -> Void) {
        // Positions before `cut` are decided: a match starting there ends within what is here.
        let cut = final ? pending.count : max(0, pending.count - holdBack)
        guard cut > 0 else { return }
        pending.withUnsafeMutableBytes { p in
            let all = UnsafeRawBufferPointer(p)
            // Ranges are found before any is masked, so each secret is looked for in the bytes as sent.
            var masked: [Range<Int>] = []
            for f in finders {
                for r in f.ranges(in: all) where r.lowerBound < cut { masked.append(r) }
            }
            // A match that runs past `cut` is masked whole; its end stays held, already masked.
            for r in masked { for k in r { p[k] = UInt8(ascii: "*") } }
            emit(UnsafeRawBufferPointer(rebasing: all[0..<cut]))
        }
        pending.removeFirst(cut)
    }
}
