extension ExchangeStateMachine {
    /// The answer to the client, and the hold on it while the response is looked at for a token error: a
    /// sub-machine of the exchange whose phase changes only through the events below. It knows nothing of the
    /// transfer; the top machine tells it what the transfer allows (an injected token to inspect, the client's
    /// queue) and carries its answers over to ``Upstream`` (a pause).
    struct Response: Equatable {
        enum Phase: Equatable {
            case none
            /// The head is decided and waits (with the connection) to go out with the first body bytes or at the
            /// end, so a small response costs one `send`.
            case headReady(ResponseFraming)
            /// The head and up to ``ExchangeStateMachine/lookAhead`` body bytes are held to look for a token error.
            case holding(ResponseFraming, bytes: Int)
            /// The head is written; body bytes follow.
            case streaming(ResponseFraming)
            case complete
        }

        private(set) var phase: Phase

        /// No head decided yet.
        static let none = Response(phase: .none)

        private init(phase: Phase) {
            self.phase = phase
        }

        /// No head is decided yet (upstream header lines still belong to it).
        var awaitsHead: Bool { phase == .none }

        /// Something of the answer reached the client (its head at least): it can no longer be replaced by another
        /// attempt's, or by an error.
        var hasBegun: Bool {
            switch phase {
            case .streaming, .complete: return true
            case .none, .headReady, .holding: return false
            }
        }

        /// The head and body are held to look for a token error.
        var isHolding: Bool {
            if case .holding = phase { return true }
            return false
        }

        /// The framing of the committed head.
        var framing: ResponseFraming? {
            switch phase {
            case .headReady(let f), .holding(let f, _), .streaming(let f): return f
            case .none, .complete: return nil
            }
        }

        /// The attempt's answer is dropped (a retry, a token rejection, a failure): nothing of it was written.
        mutating func forget() {
            phase = .none
        }

        /// The proxy answered the exchange itself.
        mutating func answered() {
            phase = .complete
        }

        /// The head is decided; `inspection` is what the transfer allows looking for (``Inspection/none`` when no
        /// refreshable token was injected).
        mutating func commit(_ framing: ResponseFraming, inspection: Inspection) -> CommitStep {
            switch inspection {
            case .none:
                phase = .headReady(framing)
                return .ready
            case .holdBody:
                phase = .holding(framing, bytes: 0)
                return .hold
            case .rejectedByStatus:
                phase = .holding(framing, bytes: 0)
                return .rejected
            }
        }

        /// `count` body bytes came from the upstream. `full`: the client's queue is at its limit.
        mutating func body(count: Int, clientFailed: Bool, full: Bool) -> BodyStep {
            switch phase {
            case .none:
                return .commitHeadFirst
            case .holding(let f, let n):
                if n + count <= ExchangeStateMachine.lookAhead {
                    phase = .holding(f, bytes: n + count)
                    return .hold
                }
                // Token errors are small: a body this large is the real answer, and these bytes follow the held.
                if clientFailed { return .abort }
                phase = .streaming(f)
                return n == 0 ? .write : .writeHeld(bytes: n)
            case .headReady(let f), .streaming(let f):
                if clientFailed { return .abort }
                if f.noBody { return .discard }
                if full { return .pause }
                phase = .streaming(f)
                return .write
            case .complete:
                return .abort
            }
        }

        /// Whether body bytes may be taken now by a filter that cannot hand them back (see
        /// ``ExchangeStateMachine/upstreamBodyMayFlow(clientPending:now:)``).
        func mayFlow(full: Bool) -> Bool {
            switch phase {
            case .headReady(let f), .streaming(let f): return f.noBody || !full
            case .none, .holding, .complete: return true
            }
        }

        /// Stop holding: the held head and body go to the client.
        mutating func release(transferLive: Bool) -> ReleaseStep {
            guard case .holding(let f, let n) = phase else { return .keep }
            if n == 0 {
                phase = .headReady(f)
                if !transferLive { return .keep }
                phase = .streaming(f)
                return .flushHead
            }
            phase = .streaming(f)
            return .writeHeld(bytes: n)
        }

        /// What must happen before the transfer's end can complete the answer.
        var preparationForEnd: EndPreparation {
            switch phase {
            case .none: return .commitHead
            case .holding: return .inspectHeld
            case .headReady, .streaming, .complete: return .none
            }
        }

        /// The transfer ended well: the framing to finish the answer with, nil when there is none to finish (the
        /// answer was complete already, or the end was reported before its preparation).
        mutating func complete() -> ResponseFraming? {
            switch phase {
            case .headReady(let f), .streaming(let f):
                phase = .complete
                return f
            case .none, .holding, .complete:
                return nil
            }
        }

        /// The exchange failed: true when the answer had begun and can only be cut; else it is forgotten, for the
        /// error's answer.
        mutating func fail() -> Bool {
            if case .streaming = phase { return true }
            phase = .none
            return false
        }
    }

    /// What the connection does before reporting a successful transfer's end (``transferEnded(_:verdict:)``), so
    /// that the end is reported once.
    enum EndPreparation: Equatable {
        case none
        /// No final head came (a lone 401 challenge, or nothing): commit the head from what was received.
        case commitHead
        /// Look at the held body for a token error (then ``tokenRejection(_:)``, or ``releaseHeld(transferLive:)``).
        case inspectHeld
    }
}
