#if canImport(Glibc)
    import Glibc
#endif

/// A copy of the request body as it streams upstream, so the request can be replayed after a token
/// rejection. Kept in memory up to ``memoryLimit``, then in a temporary file under the state directory
/// (unlinked as soon as it is created, so it disappears with the descriptor). Past `limit` bytes it stops copying and ``overflowed`` is set: such
/// a request cannot be retried.
final class ReplayBuffer {
    static let memoryLimit = 1024 * 1024

    private let limit: Int64
    private let directory: String
    private var memory: [UInt8] = []
    private var fd: Int32 = -1
    private(set) var count: Int64 = 0
    private(set) var overflowed = false
    private(set) var failure: String?

    init(limit: Int64, directory: String) {
        self.limit = limit
        self.directory = directory
    }

    deinit {
        if fd >= 0 { close(fd) }
    }

    func append(_ bytes: UnsafeRawBufferPointer) {
        guard !overflowed, !bytes.isEmpty else { return }
        guard count + Int64(bytes.count) <= limit else {
            overflowed = true
            releaseStorage()
            return
        }
        if fd < 0 && memory.count + bytes.count <= Self.memoryLimit {
            memory.append(contentsOf: bytes)
        } else {
            if fd < 0 && !openFile() { return }
            var off = 0
            while off < bytes.count {
                let n = pwrite(
                    fd, bytes.baseAddress! + off, bytes.count - off, off_t(count) + off_t(off) - off_t(memory.count))
                if n < 0 {
                    if errno == EINTR { continue }
                    failure = "cannot write replay file: \(lastErrorString())"
                    overflowed = true
                    releaseStorage()
                    return
                }
                off += n
            }
        }
        count += Int64(bytes.count)
    }

    /// Copies bytes starting at `offset` into `buffer`; returns how many.
    func read(at offset: Int64, into buffer: UnsafeMutableRawBufferPointer) -> Int {
        guard !overflowed, offset < count else { return 0 }
        if offset < Int64(memory.count) {
            let n = min(buffer.count, memory.count - Int(offset))
            memory.withUnsafeBytes {
                buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[Int(offset)..<(Int(offset) + n)]))
            }
            return n
        }
        let fileOffset = offset - Int64(memory.count)
        let n = min(Int64(buffer.count), count - offset)
        let r = pread(fd, buffer.baseAddress, Int(n), off_t(fileOffset))
        return max(0, r)
    }

    private func openFile() -> Bool {
        let dir = directory
        mkdir(dir, 0o700)
        var template = Array("\(dir)/replay-XXXXXX".utf8CString)
        let f = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard f >= 0 else {
            failure = "cannot create a replay file in \(dir): \(lastErrorString())"
            overflowed = true
            releaseStorage()
            return false
        }
        fd = f
        // Unlink at once: the data lives as long as the descriptor, and nothing is left behind on a crash.
        template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
        return true
    }

    private func releaseStorage() {
        memory = []
        if fd >= 0 { close(fd); fd = -1 }
    }
}
