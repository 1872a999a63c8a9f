/// A growable byte queue with a read cursor: bytes are appended at the end and consumed from the front
/// without moving memory on every read. Storage is compacted lazily, so a connection that keeps its
/// buffer bounded also keeps its memory bounded.
public struct ByteBuffer: Sendable {
    @usableFromInline var storage: [UInt8] = []
    @usableFromInline var readIndex: Int = 0

    public init() {}

    public init(_ bytes: some Sequence<UInt8>) {
        storage = Array(bytes)
    }

    /// Number of unread bytes.
    @inlinable public var count: Int { storage.count - readIndex }
    @inlinable public var isEmpty: Bool { readIndex == storage.count }

    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        compactIfWorthwhile()
        storage.append(contentsOf: bytes)
    }

    public mutating func append(_ bytes: some Collection<UInt8>) {
        compactIfWorthwhile()
        storage.append(contentsOf: bytes)
    }

    public mutating func append(_ string: String) {
        compactIfWorthwhile()
        storage.append(contentsOf: string.utf8)
    }

    /// Marks `n` bytes at the front as read.
    public mutating func consume(_ n: Int) {
        precondition(n <= count)
        readIndex += n
        if readIndex == storage.count {
            storage.removeAll(keepingCapacity: storage.capacity <= 512 * 1024)
            readIndex = 0
        }
    }

    /// Removes and returns up to `n` bytes from the front.
    public mutating func read(upTo n: Int) -> ArraySlice<UInt8> {
        let k = Swift.min(n, count)
        let slice = storage[readIndex..<(readIndex + k)]
        consume(k)
        return slice
    }

    /// Gives the storage back to the allocator (an idle connection keeps no buffer).
    public mutating func releaseStorage() {
        storage = []
        readIndex = 0
    }

    /// Bytes of storage held, read or not.
    public var capacity: Int { storage.capacity }

    public mutating func removeAll() {
        storage.removeAll(keepingCapacity: storage.capacity <= 512 * 1024)
        readIndex = 0
    }

    /// Calls `body` with the unread bytes.
    @inlinable
    public func withUnreadBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try storage.withUnsafeBytes { raw in
            try body(UnsafeRawBufferPointer(rebasing: raw[readIndex...]))
        }
    }

    public var unreadBytes: [UInt8] { Array(storage[readIndex...]) }

    @usableFromInline mutating func compactIfWorthwhile() {
        if readIndex > 0 && readIndex >= storage.count / 2 {
            storage.removeFirst(readIndex)
            readIndex = 0
        }
    }
}

extension String {
    /// The text of a NUL-terminated C buffer, up to its first NUL (the whole buffer if it has none); bytes that
    /// are not UTF-8 become U+FFFD.
    init(nulTerminated buffer: [CChar]) {
        let end = buffer.firstIndex(of: 0) ?? buffer.endIndex
        self = buffer[..<end].withUnsafeBytes { String(decoding: $0, as: UTF8.self) }
    }
}
