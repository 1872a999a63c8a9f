import Dispatch
import Synchronization

/// Every serial queue of the proxy is made here, in one of two ways.
///
/// **A thread of its own** (``ownThread(_:)``) for the queues that work all the time: each event loop and the token
/// service. The set of these threads is fixed at start-up, so under load the proxy's thread count does not move
/// (see ``DispatchThread`` for why libdispatch's pool does not give that).
///
/// **libdispatch's worker pool** (``make(_:)``) for the queues that are idle nearly always (admin listener, reload,
/// SIGHUP, configuration watcher, Kerberos renewal, the command-line tools): a worker runs them when they get work
/// and exits after 5 s without any. On Linux each libdispatch root queue (one per QoS class) has a pool of its own,
/// and the class sets the workers' nice value (user-initiated: -2, default: 0); they share one class, so one pool.
/// (Name resolution runs on the global queue, a separate pool of at most one worker per CPU.)
public enum ProxyQueue {
    public static let qos: DispatchQoS = .userInitiated

    /// A serial queue named `label` in the proxy's one worker pool.
    public static func make(_ label: String) -> DispatchQueue { DispatchQueue(label: label, qos: qos) }

    /// A serial queue named `label` run by a thread of its own; a pool queue (``make(_:)``) when that thread
    /// cannot be started, with the reason kept for ``takeThreadFallbacks()``.
    public static func ownThread(_ label: String) -> DispatchQueue {
        switch DispatchThread.start(label: label) {
        case .success(let t):
            return t.queue
        case .failure(let f):
            fallbacks.withLock { $0.append("\(label): \(f.description)") }
            return make(label)
        }
    }

    /// The queues that fell back to the pool since the last call, each with its reason (for a start-up warning).
    public static func takeThreadFallbacks() -> [String] {
        fallbacks.withLock { list in
            defer { list.removeAll() }
            return list
        }
    }

    private static let fallbacks = Mutex<[String]>([])
}
