import Testing

@testable import AuthProxyCore

/// ``ChangeDebouncer`` on a fake clock (nanoseconds): one look per burst of file-system events, after the
/// burst has been quiet, and no later than the maximum delay.
@Suite struct ChangeDebouncerTests {
    static let ms: UInt64 = 1_000_000

    @Test func oneEventIsLookedAtAfterTheQuietTime() {
        var d = ChangeDebouncer(quiet: 300 * Self.ms, maxDelay: 2000 * Self.ms)
        #expect(!d.pending)
        #expect(d.eventSeen(now: 1000 * Self.ms) == .armTimer(at: 1300 * Self.ms))
        #expect(d.pending)
        #expect(d.timerFired(now: 1300 * Self.ms) == .check)
        #expect(!d.pending)
        // A stray timer with nothing pending does nothing.
        #expect(d.timerFired(now: 1400 * Self.ms) == .none)
    }

    @Test func aBurstIsOneLookAfterItsLastEvent() {
        // A Kubernetes volume update: new directory, files written, ..data swapped, old directory removed.
        var d = ChangeDebouncer(quiet: 300 * Self.ms, maxDelay: 2000 * Self.ms)
        #expect(d.eventSeen(now: 0) == .armTimer(at: 300 * Self.ms))
        #expect(d.eventSeen(now: 100 * Self.ms) == .none)
        #expect(d.eventSeen(now: 250 * Self.ms) == .none)
        // The timer comes while the burst goes on: wait for quiet after the last event.
        #expect(d.timerFired(now: 300 * Self.ms) == .armTimer(at: 550 * Self.ms))
        #expect(d.timerFired(now: 550 * Self.ms) == .check)
        // The next event starts a new burst.
        #expect(d.eventSeen(now: 5000 * Self.ms) == .armTimer(at: 5300 * Self.ms))
    }

    @Test func aFileRewrittenWithoutPauseIsLookedAtByTheMaximumDelay() {
        var d = ChangeDebouncer(quiet: 300 * Self.ms, maxDelay: 1000 * Self.ms)
        _ = d.eventSeen(now: 0)
        var now: UInt64 = 0
        var action = ChangeDebouncer.Action.none
        while now < 3000 * Self.ms {
            now += 100 * Self.ms
            _ = d.eventSeen(now: now)
            if now % (300 * Self.ms) == 0 {
                action = d.timerFired(now: now)
                if action == .check { break }
                if case .armTimer(let at) = action { #expect(at <= 1000 * Self.ms) }
            }
        }
        #expect(action == .check)
        #expect(now <= 1200 * Self.ms)
    }
}
