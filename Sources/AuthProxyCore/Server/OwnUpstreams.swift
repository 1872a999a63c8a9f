import Synchronization

/// The upstream connections of one client connection that authenticates them itself (NTLM or Negotiate sent
/// by the client, see ``ConnectionBoundAuthentication``): a libcurl multi handle of its own, whose connection
/// cache no other client reaches, and an owner number under which the proxy's own HTTP/1.1 client keeps its
/// idle connections apart in the loop's pool. Both are closed with the client connection.
///
/// Confined to the loop's queue, like the client connection that holds it.
final class OwnUpstreams {
    /// The owner number in ``UpstreamConnectionPool/Key`` (never reused within the process, unlike an object
    /// address: a later client must never find an earlier one's connections).
    let owner: UInt64
    private let loop: EventLoop
    private var curl: CurlMulti?

    private static let lastOwner = Atomic<UInt64>(0)

    init(loop: EventLoop) {
        self.loop = loop
        owner = Self.lastOwner.add(1, ordering: .relaxed).newValue
    }

    /// The multi handle for this client's libcurl transfers (made on first use).
    var multi: CurlMulti {
        if let curl { return curl }
        let m = CurlMulti(queue: loop.queue)
        m.ownedByOneClient = true
        curl = m
        return m
    }

    /// The client connection closed (its transfer was cancelled first): its upstream connections close too.
    func close() {
        loop.http1.closeOwned(by: owner)
        guard let m = curl else { return }
        curl = nil
        // Always on a later turn of the queue: close() may run from a delegate call that the multi handle makes
        // and then carries on (reading its next message, asking for its next timeout), and a cancel made inside
        // libcurl is itself deferred to the queue. The teardown comes after both.
        loop.queue.async { m.tearDown() }
    }
}
