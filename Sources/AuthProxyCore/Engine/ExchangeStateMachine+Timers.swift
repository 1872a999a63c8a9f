extension ExchangeStateMachine {
    /// The connection's clocks: when the client last made progress and when shutdown began, and the deadline
    /// checks made from them. A sub-machine of the connection's machine: time is passed in (uptime nanoseconds),
    /// so tests move a fake clock instead of waiting, and its readings change only through the events below.
    struct Timers: Equatable {
        /// Last time the client sent bytes or took response bytes.
        private(set) var lastClientProgress: UInt64
        /// When shutdown began (nil: it has not).
        private(set) var shutdownSince: UInt64? = nil

        init(now: UInt64) {
            lastClientProgress = now
        }

        mutating func clientProgress(now: UInt64) {
            lastClientProgress = now
        }

        /// Shutdown began at `now`: false when it had already.
        mutating func shutdownBegan(now: UInt64) -> Bool {
            guard shutdownSince == nil else { return false }
            shutdownSince = now
            return true
        }

        /// Shutdown began at least `quiet` ago.
        func shutdownQuietOver(now: UInt64, quiet: UInt64) -> Bool {
            guard let since = shutdownSince else { return false }
            return now &- since >= quiet
        }

        /// The client has sent nothing (nor taken anything) for more than `limit`, counted from `since` when that is
        /// later (a phase that began then).
        func clientSilent(now: UInt64, since: UInt64 = 0, longerThan limit: UInt64) -> Bool {
            now &- max(since, lastClientProgress) > limit
        }

        /// The client neither sent nor took bytes, nor did a send move any, for more than `limit`.
        func clientStalled(now: UInt64, lastSendProgress: UInt64, limit: UInt64) -> Bool {
            now &- max(lastClientProgress, lastSendProgress) > limit
        }

        /// The transfer, ready to move bytes, moved none for more than `limit`. libcurl's low-speed check averages
        /// over a window, so a stall after a trickle would be cut late: this one is the proxy's own.
        static func upstreamStalled(_ t: Upstream.Transfer, now: UInt64, limit: UInt64) -> Bool {
            !t.pausedForClient && !t.waitingForBody && now &- t.lastProgress > limit
        }

        /// A closing connection (closing since `since`) is done: a client that stopped reading the last response
        /// (`clientPending` bytes still queued) is cut after the idle limit; once flushed, input is dropped while it
        /// keeps coming, up to ``Limits/linger`` of quiet and ``Limits/lingerTotal`` in all.
        func lingerOver(
            since: UInt64, now: UInt64, clientPending: Int, lastSendProgress: UInt64, limits: Limits
        ) -> Bool {
            // When response bytes last moved to the client (or the closing began).
            let lastSent = max(since, lastSendProgress)
            if clientPending > 0 { return now &- lastSent > limits.idleTimeout }
            let quiet = now &- max(lastSent, lastClientProgress)
            return quiet > limits.linger || now &- lastSent > limits.lingerTotal
        }
    }
}

// MARK: - Timeouts: checked once a second with the time passed in, so tests move a fake clock instead of waiting.
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
        return now &- timers.lastClientProgress >= duration
    }

    /// `clientPending`: response bytes queued for the client; `lastSendProgress`: when a send last moved bytes
    /// (a slow but steady reader is not idle); `clientReadsPaused`: the connection stopped reading the client.
    func tick(now: UInt64, clientPending: Int, lastSendProgress: UInt64, clientReadsPaused: Bool = false) -> TimerStep {
        switch state {
        case .awaitingHead(let started?):
            return now &- started > limits.headerTimeout ? .headerTimedOut : .none
        case .awaitingHead(nil):
            if timers.shutdownQuietOver(now: now, quiet: limits.shutdownQuiet) { return .closeForShutdown }
            let limit = exchanges == 0 ? limits.headerTimeout : limits.idleTimeout
            return timers.clientSilent(now: now, longerThan: limit) ? .close : .none
        case .awaitingTunnelContent(let since), .tlsHandshake(let since):
            if timers.shutdownQuietOver(now: now, quiet: limits.shutdownQuiet) { return .close }
            return timers.clientSilent(now: now, since: since, longerThan: limits.headerTimeout) ? .close : .none
        case .exchange(let e):
            let transfer = e.upstream.transfer
            let waitingOnClient =
                clientPending > 0 || e.request.isCollectingForm
                || (transfer?.waitingForBody == true && !e.request.isComplete)
            if waitingOnClient,
                timers.clientStalled(now: now, lastSendProgress: lastSendProgress, limit: limits.idleTimeout)
            {
                return .clientStalled
            }
            if let t = transfer, Timers.upstreamStalled(t, now: now, limit: limits.upstreamTimeout) {
                return .upstreamStalled
            }
            // An upload held back by a slow upstream: the client may have reset meanwhile (fault campaign: its
            // socket, the transfer and the replay file stayed until the idle timeout).
            if clientReadsPaused, !e.request.isComplete { return .probeClient }
            return .none
        case .tunnel:
            return .tunnel
        case .closing(let since):
            let over = timers.lingerOver(
                since: since, now: now, clientPending: clientPending, lastSendProgress: lastSendProgress,
                limits: limits)
            return over ? .close : .none
        case .closed:
            return .none
        }
    }
}
