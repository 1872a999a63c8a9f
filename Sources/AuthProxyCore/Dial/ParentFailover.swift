/// Which parent proxy a request tries first, and what a failure does to a parent: the failover policy, pure
/// (times are passed in), shared by every path through ``ParentRouting``.
///
/// A parent that refused the connection, timed out, or still answered 407 after the handshake is skipped for
/// `backoff` and then tried again by the next request that needs it (a probe, not a permanent blacklist: px
/// #250). While every candidate is in backoff they are still tried, the one whose backoff ends first first:
/// refusing the request without trying would turn a parent's short outage into the proxy's own.
public struct ParentFailover: Sendable {
    public enum Cause: String, Sendable, CaseIterable {
        /// The TCP (or TLS, for an https parent) connection to the parent failed.
        case connect
        /// The parent did not answer in time.
        case timeout
        /// 407 after the handshake: the credential was refused (or none was configured).
        case auth
        /// The parent answered a CONNECT with another error (403 from URL filtering, 502 from its own upstream).
        case refused
    }

    /// Whether a failure makes the parent skipped. A refused CONNECT is about the destination, not the parent:
    /// the next request to elsewhere may well succeed through it.
    public static func backsOff(_ cause: Cause) -> Bool { cause != .refused }

    public let backoffMillis: UInt64
    /// Until when (ms) each parent in backoff is skipped.
    private var until: [ParentProxy: UInt64] = [:]

    public init(backoffSeconds: Int) {
        backoffMillis = UInt64(max(1, backoffSeconds)) * 1000
    }

    /// `candidates` in the order they are to be tried at `now`: those not in backoff as given, then those in
    /// backoff, the earliest to expire first.
    public func order(_ candidates: [ParentProxy], now: UInt64) -> [ParentProxy] {
        if until.isEmpty || candidates.count < 2 { return candidates }
        var ready: [ParentProxy] = []
        var waiting: [(ParentProxy, UInt64)] = []
        for p in candidates {
            if let u = until[p], u > now { waiting.append((p, u)) } else { ready.append(p) }
        }
        return ready + waiting.sorted { $0.1 < $1.1 }.map(\.0)
    }

    public func inBackoff(_ p: ParentProxy, now: UInt64) -> Bool {
        guard let u = until[p] else { return false }
        return u > now
    }

    public mutating func failed(_ p: ParentProxy, cause: Cause, now: UInt64) {
        guard Self.backsOff(cause) else { return }
        until[p] = now + backoffMillis
    }

    /// The parent carried a request: any backoff ends.
    public mutating func succeeded(_ p: ParentProxy) {
        if !until.isEmpty { until[p] = nil }
    }
}
