#if canImport(Glibc)
    import Glibc
#endif

/// A plain mutex for state that holds C pointers (which `Synchronization.Mutex`'s region checks reject).
///
/// The `pthread_mutex_t` lives in its own heap allocation: Swift does not promise a stable address for a
/// stored property (`&mutex` may point at a temporary copy), and a mutex must never move. NIO's `Lock`
/// allocates it the same way.
final class Lock: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    init() {
        mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        var attr = pthread_mutexattr_t()
        pthread_mutexattr_init(&attr)
        #if DEBUG
            // Debug builds check: locking twice from one thread fails loudly instead of deadlocking.
            pthread_mutexattr_settype(&attr, Int32(PTHREAD_MUTEX_ERRORCHECK))
        #endif
        let err = pthread_mutex_init(mutex, &attr)
        pthread_mutexattr_destroy(&attr)
        precondition(err == 0, "pthread_mutex_init failed: \(err)")
    }

    deinit {
        let err = pthread_mutex_destroy(mutex)
        precondition(err == 0, "pthread_mutex_destroy failed: \(err)")
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    func lock() {
        let err = pthread_mutex_lock(mutex)
        precondition(err == 0, "pthread_mutex_lock failed: \(err)")
    }

    func unlock() {
        let err = pthread_mutex_unlock(mutex)
        precondition(err == 0, "pthread_mutex_unlock failed: \(err)")
    }

    func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock()
        defer { unlock() }
        return try body()
    }
}
