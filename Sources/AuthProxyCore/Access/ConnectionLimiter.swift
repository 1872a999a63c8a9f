import Synchronization

/// Counts open client connections for the whole process and per client address, so `max_connections` holds
/// across all event loops and one address cannot take more than `max_connections_per_client` of them.
///
/// The limits can change while connections are open (a reload): connections over a lowered limit stay, and
/// new ones are refused until enough have closed.
public final class ConnectionLimiter: Sendable {
    public var total: Int { state.withLock { $0.total } }
    public var perClient: Int { state.withLock { $0.perClient } }

    private struct State {
        var total: Int
        var perClient: Int
        var open = 0
        var byClient: [IPAddress: Int] = [:]
        var refused = Refusals()
    }

    /// Connections refused since the start, by limit: the log shows them (rate-limited), metrics can export them.
    public struct Refusals: Sendable, Equatable {
        public var total = 0
        public var perClient = 0
    }

    private let state: Mutex<State>

    public init(total: Int, perClient: Int) {
        state = Mutex(State(total: total, perClient: perClient))
    }

    /// New limits for the connections accepted from now on.
    public func setLimits(total: Int, perClient: Int) {
        state.withLock { s in
            s.total = total
            s.perClient = perClient
        }
    }

    public enum Refusal: Sendable, Equatable {
        case total
        case perClient
    }

    /// Takes a slot for `client`, or says which limit is reached.
    public func acquire(_ client: IPAddress) -> Refusal? {
        state.withLock { s in
            if s.open >= s.total {
                s.refused.total += 1
                return .total
            }
            let n = s.byClient[client, default: 0]
            if n >= s.perClient {
                s.refused.perClient += 1
                return .perClient
            }
            s.open += 1
            s.byClient[client] = n + 1
            return nil
        }
    }

    /// Gives back a slot taken by ``acquire(_:)``.
    public func release(_ client: IPAddress) {
        state.withLock { s in
            s.open -= 1
            let n = s.byClient[client, default: 1] - 1
            if n <= 0 { s.byClient.removeValue(forKey: client) } else { s.byClient[client] = n }
        }
    }

    public var openCount: Int { state.withLock { $0.open } }

    public var refusals: Refusals { state.withLock { $0.refused } }
}
