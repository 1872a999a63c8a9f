import CAuthProxyShims
import Dispatch

#if canImport(Glibc)
    import Glibc
#endif

/// A thread of the proxy's own that runs one serial Dispatch queue, and nothing else, for the life of the process.
///
/// Dispatch sources still deliver every event (libdispatch's manager thread waits in `epoll` and pushes each
/// handler onto the queue); what changes is which thread runs the queue. A queue made with `DispatchQueue(label:)`
/// is run by a worker of libdispatch's overcommit pool, and on Linux that pool starts a new worker whenever work
/// arrives while none is waiting, including in the instant a worker is between two queues, and keeps it while
/// it is woken at least every 5 s: under steady load the pool creeps up and never comes back (docs/SOAK.md,
/// "Threads"). Here the queue targets a root queue that libdispatch binds to this thread (the "runloop" root
/// queue it exports for swift-corelibs-foundation): pushing work onto it writes to an eventfd, and this thread
/// blocks in `read` on that descriptor and then runs what was pushed. So the number of threads is the number of
/// these threads, known at start-up and fixed.
///
/// ``start(label:)`` proves the mechanism before relying on it (the eventfd must be found, and pushing a
/// block must make it readable); when it cannot, it returns why and the caller uses a pool queue instead.
final class DispatchThread: @unchecked Sendable {
    /// Runs on this thread only.
    let queue: DispatchQueue
    /// The kernel's id of the thread (for `/proc/self/task/TID`).
    let tid: Int32

    private init(queue: DispatchQueue, tid: Int32) {
        self.queue = queue
        self.tid = tid
    }

    /// Why a thread could not be started; the text names the step that failed.
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// The nice values tried for the threads, best first: just above libdispatch's manager thread (nice -4 when
    /// it may), the thread that waits in `epoll` and hands events to the queues. Ranked above it, a busy thread
    /// runs until its queue is empty while events pile up for the manager's next `epoll_wait`; ranked below it,
    /// the manager preempts the thread for nearly every event and hands them over one by one. `bench/ab.sh` put
    /// the difference at about 1.3× CPU per request at saturation (docs/SOAK.md). Lowering the nice value needs
    /// `CAP_SYS_NICE` or a `RLIMIT_NICE` allowance; without either every thread, the manager included, keeps the
    /// process's value, where the two measured the same.
    static let niceValues: [Int32] = [-6, -5, -4, -3, -2, -1]

    /// Starts a thread that runs the returned queue, named `label` (the thread: `ap.` for `authproxy.`).
    static func start(label: String) -> Result<DispatchThread, Failure> {
        let startup = Startup(label: label)
        var thread = pthread_t()
        let box = Unmanaged.passRetained(startup).toOpaque()
        let rc = pthread_create(
            &thread, nil,
            { raw in
                Unmanaged<Startup>.fromOpaque(raw!).takeRetainedValue().run()
                return nil
            }, box)
        guard rc == 0 else {
            Unmanaged<Startup>.fromOpaque(box).release()
            return .failure(Failure(description: "pthread_create: \(String(cString: strerror(rc)))"))
        }
        pthread_detach(thread)
        startup.created.wait()
        guard let root = startup.root, startup.fd >= 0 else {
            return .failure(
                Failure(
                    description: startup.root == nil
                        ? "libdispatch did not create a thread-bound queue"
                        : "the thread-bound queue's eventfd was not found"))
        }
        let queue = DispatchQueue(label: label, attributes: .initiallyInactive)
        guard let lane = underlyingQueue(queue) else {
            startup.handed.signal()
            return .failure(Failure(description: "the Dispatch queue's C object was not found"))
        }
        ap_dispatch_set_target_queue(lane, root)
        queue.activate()
        // The proof: this block must make the thread's eventfd readable. The thread checks, then runs it.
        queue.async {}
        startup.queue = queue
        startup.handed.signal()
        startup.verdict.wait()
        guard startup.proven else {
            return .failure(Failure(description: "work pushed onto the queue did not wake its thread"))
        }
        return .success(DispatchThread(queue: queue, tid: startup.tid))
    }

    /// The `dispatch_queue_t` inside a `DispatchQueue`. The Swift overlay keeps it in a stored property and has
    /// no public accessor; reflection reads it (nil if the overlay ever changes).
    private static func underlyingQueue(_ queue: DispatchQueue) -> UnsafeMutableRawPointer? {
        var mirror: Mirror? = Mirror(reflecting: queue)
        while let m = mirror {
            for child in m.children where child.label == "__wrapped" {
                if let p = child.value as? OpaquePointer { return UnsafeMutableRawPointer(p) }
            }
            mirror = m.superclassMirror
        }
        return nil
    }

    /// What the starting thread and the new thread hand each other, in order: the root queue and its eventfd
    /// (`created`), the queue targeting it (`handed`, nil when the start was given up), the proof (`verdict`).
    private final class Startup: @unchecked Sendable {
        let label: String
        let created = DispatchSemaphore(value: 0)
        let handed = DispatchSemaphore(value: 0)
        let verdict = DispatchSemaphore(value: 0)
        var root: UnsafeMutableRawPointer?
        var fd: Int32 = -1
        var tid: Int32 = 0
        var queue: DispatchQueue?
        var proven = false

        init(label: String) { self.label = label }

        func run() {
            tid = ap_gettid()
            // "authproxy.loop.0" -> "ap.loop.0": the kernel keeps 15 bytes of a thread name.
            let name = label.hasPrefix("authproxy.") ? "ap." + label.dropFirst("authproxy.".count) : label
            ap_thread_set_name(name)
            for nice in DispatchThread.niceValues where ap_thread_set_nice(nice) == 0 { break }
            root = label.withCString { ap_dispatch_thread_queue_create($0) }
            if let root { fd = ap_dispatch_thread_queue_fd(root) }
            created.signal()
            guard let root, fd >= 0 else { return }
            handed.wait()
            guard let queue else { return }
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            proven = poll(&p, 1, 0) == 1 && p.revents & Int16(POLLIN) != 0
            verdict.signal()
            guard proven else { return }
            withExtendedLifetime(queue) { Self.serve(root: root, fd: fd) }
        }

        /// Waits for the eventfd, then runs everything pushed onto the queue; forever.
        private static func serve(root: UnsafeMutableRawPointer, fd: Int32) -> Never {
            var count: UInt64 = 0
            while true {
                if read(fd, &count, 8) < 0 {
                    let e = errno
                    if e == EINTR || e == EAGAIN { continue }
                    fatalError("authproxy: reading a Dispatch thread's eventfd failed: \(String(cString: strerror(e)))")
                }
                while ap_dispatch_thread_queue_drain_one(root) {}
            }
        }
    }
}
