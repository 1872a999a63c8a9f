/// Timeouts: checked once a second with the time passed in, so tests move a fake clock instead of waiting.
extension ExchangeStateMachine {
    enum TimerStep: Equatable {
        case none
        /// A request head started but did not finish in time: answer 408 and close.
        case headerTimedOut
        /// Idle, lingering or a handshake that never finished: close without a word.
        case close
        /// Shutdown: an idle connection's quiet time is over; begin closing (``closingForShutdown(now:)``).
        case closeForShutdown
        /// The client stopped reading its response or sending its body: log and close.
        case clientStalled
        /// The upstream sent and took nothing while we were ready for it: fail the transfer.
        case upstreamStalled
        /// A tunnel checks its own timeouts.
        case tunnel
        /// Reads from the client are paused (back-pressure) in the middle of its request body, so a reset would
        /// go unseen until they resume: ask the socket whether the client hung up (then ``clientGone()``).
        case probeClient
    }

    /// Whether the connection waits for a request and has heard nothing from the client for `duration`.
    func isIdle(now: UInt64, for duration: UInt64) -> Bool {
        guard case .awaitingHead(nil) = state else { return false }
        return now &- lastClientProgress >= duration
    }

    /// `clientPending`: response bytes queued for the client; `lastSendProgress`: when a send last moved bytes
    /// (a slow but steady reader is not idle); `clientReadsPaused`: the connection stopped reading the client.
    func tick(now: UInt64, clientPending: Int, lastSendProgress: UInt64, clientReadsPaused: Bool = false) -> TimerStep {
        switch state {
        case .awaitingHead(let started?):
            return now &- started > limits.headerTimeout ? .headerTimedOut : .none
        case .awaitingHead(nil):
            if let since = shutdownSince, now &- since >= limits.shutdownQuiet { return .closeForShutdown }
            let limit = exchanges == 0 ? limits.headerTimeout : limits.idleTimeout
            return now &- lastClientProgress > limit ? .close : .none
        case .tlsHandshake(let since):
            if let down = shutdownSince, now &- down >= limits.shutdownQuiet { return .close }
            return now &- max(since, lastClientProgress) > limits.headerTimeout ? .close : .none
        case .exchange(let e):
            let progress = max(lastClientProgress, lastSendProgress)
            var waitingOnClient = clientPending > 0 || e.request == .collectingForm
            if case .transferring(let t) = e.upstream, t.waitingForBody, e.request != .complete {
                waitingOnClient = true
            }
            if waitingOnClient, now &- progress > limits.idleTimeout { return .clientStalled }
            // libcurl's low-speed check averages over a window, so a stall after a trickle would be cut late.
            if case .transferring(let t) = e.upstream, !t.pausedForClient, !t.waitingForBody,
                now &- t.lastProgress > limits.upstreamTimeout
            {
                return .upstreamStalled
            }
            // An upload held back by a slow upstream: the client may have reset meanwhile (fault campaign: its
            // socket, the transfer and the replay file stayed until the idle timeout).
            if clientReadsPaused, e.request != .complete { return .probeClient }
            return .none
        case .tunnel:
            return .tunnel
        case .closing(let since):
            // When response bytes last moved to the client (or the closing began).
            let lastSent = max(since, lastSendProgress)
            if clientPending > 0 {
                // Still sending the last response: only a client that stopped reading is cut off.
                return now &- lastSent > limits.idleTimeout ? .close : .none
            }
            // Flushed and half-closed: input is dropped while it keeps coming, up to the total linger time.
            let quiet = now &- max(lastSent, lastClientProgress)
            return quiet > limits.linger || now &- lastSent > limits.lingerTotal ? .close : .none
        case .closed:
            return .none
        }
    }
}
