import Dispatch

/// Every serial queue of the proxy is made here, at one QoS class.
///
/// On Linux each libdispatch root queue (one per QoS class) has a pool of worker threads of its own, and a worker
/// idle in one pool never runs another pool's work; the class also sets the workers' nice value (user-initiated:
/// -2, default: 0; the manager thread that delivers events runs at -4). With the event loops user-initiated and
/// the other queues (accept, tokens, admin, reload) at the default class, two pools grew side by side to their
/// own high-water marks; moving the loops to the default class instead cost 1.3–1.8× CPU per request at
/// saturation (`bench/ab.sh`, see docs/SOAK.md). So all of them are user-initiated: one pool, bounded by how
/// many of these queues run at once. (Name resolution runs on the global queue, a separate pool of at most one
/// worker per CPU.)
public enum ProxyQueue {
    public static let qos: DispatchQoS = .userInitiated

    /// A serial queue named `label` in the proxy's one worker pool.
    public static func make(_ label: String) -> DispatchQueue { DispatchQueue(label: label, qos: qos) }
}
