/// The retry budget of each upstream host: retries may add at most ``ratioPercent`` % to the requests a host
/// was sent over the last ``window``, plus ``minimum`` per window so that a quiet host can still be retried.
/// As Envoy's retry budgets and gRPC's retry throttling do, this keeps a failing upstream from being hammered
/// by `upstream_retries` × every client: when a whole service answers 503, its load grows by at most ~20 %,
/// not threefold.
///
/// **Sliding window, cheaply.** Each host keeps the counts of the current window and of the one before; the
/// previous window's counts are weighted by how much of it still lies within ``window`` of now (the sliding
/// window counter of rate limiters), so a burst at a window's boundary does not reset the budget.
///
/// **One per event loop**, confined to its queue (no lock, no atomic): counting a request is a dictionary
/// lookup on the loop that carries it, with no allocation once the host is known. With several loops
/// (`workers`) each has its own budget over the requests it carries, so the minimum applies per loop and the
/// ratio overall. The loop's sweep drops hosts that have not been used for two windows (``prune(now:)``).
struct RetryBudget {
    /// An upstream host and port.
    struct Host: Hashable {
        var host: String
        var port: Int
    }

    struct Counts: Equatable {
        /// Start of the current window.
        var windowStart: UInt64
        var requests = 0
        var retries = 0
        var previousRequests = 0
        var previousRetries = 0
    }

    var window: UInt64 = 10_000_000_000
    var ratioPercent = 20
    var minimum = 3
    private(set) var hosts: [Host: Counts] = [:]

    init(window: UInt64 = 10_000_000_000, ratioPercent: Int = 20, minimum: Int = 3) {
        self.window = window
        self.ratioPercent = ratioPercent
        self.minimum = minimum
    }

    /// A request (a first attempt, not a retry) was sent to `host`.
    mutating func request(_ host: Host, now: UInt64) {
        let window = window
        Self.countRequest(&hosts[host, default: Counts(windowStart: now)], now: now, window: window)
    }

    private static func countRequest(_ c: inout Counts, now: UInt64, window: UInt64) {
        update(&c, now: now, window: window)
        c.requests += 1
    }

    /// Whether `host` may be sent one more retry now; when it may, the retry is counted.
    mutating func spendRetry(_ host: Host, now: UInt64) -> Bool {
        let window = window
        var c = hosts[host] ?? Counts(windowStart: now)
        Self.update(&c, now: now, window: window)
        // The share of the previous window that still lies within `window` of now.
        let elapsed = now &- c.windowStart
        let weight = window == 0 ? 0 : Double(window &- min(elapsed, window)) / Double(window)
        let requests = Double(c.requests) + Double(c.previousRequests) * weight
        let retries = Double(c.retries) + Double(c.previousRetries) * weight
        let allowed = retries + 1 <= Double(minimum) + requests * Double(ratioPercent) / 100
        if allowed { c.retries += 1 }
        hosts[host] = c
        return allowed
    }

    /// Forgets hosts that have been sent nothing for two windows.
    mutating func prune(now: UInt64) {
        let window = window
        guard hosts.contains(where: { now &- $0.value.windowStart >= 2 * window }) else { return }
        hosts = hosts.filter { now &- $0.value.windowStart < 2 * window }
    }

    /// Moves `c` to the window that contains `now`.
    private static func update(_ c: inout Counts, now: UInt64, window: UInt64) {
        let elapsed = now &- c.windowStart
        guard elapsed >= window else { return }
        if elapsed >= 2 * window {
            c = Counts(windowStart: now)
        } else {
            c.previousRequests = c.requests
            c.previousRetries = c.retries
            c.requests = 0
            c.retries = 0
            c.windowStart += window
        }
    }
}
