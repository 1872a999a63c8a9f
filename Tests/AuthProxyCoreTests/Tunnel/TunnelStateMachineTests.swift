import Testing

@testable import AuthProxyCore

private let second: UInt64 = 1_000_000_000
private let limit = 100

/// A tunnel connected at t = 10 s, idle timeout 60 s.
private func connected() -> TunnelStateMachine {
    var m = TunnelStateMachine(limit: limit, idleTimeoutSeconds: 60, connectDeadline: 30 * second)
    let a = m.connected(now: 10 * second)
    #expect(a == [.resumeReading(.upstream), .resumeReading(.client)])
    #expect(m.state == .open(client: .flowing, upstream: .flowing))
    return m
}

@Suite struct TunnelStateMachineTests {
    @Test func nothingIsReadBeforeTheUpstreamIsConnected() {
        var m = TunnelStateMachine(limit: limit, idleTimeoutSeconds: 60, connectDeadline: 30 * second)
        #expect(!m.isConnected)
        let r1 = m.readStep(from: .client, destinationPending: 0)
        #expect(r1 == .stop)
        let r2 = m.readStep(from: .upstream, destinationPending: 0)
        #expect(r2 == .stop)
        let a = m.connected(now: 1)
        #expect(!a.isEmpty)
        #expect(m.isConnected)
        let r3 = m.connected(now: 2)
        #expect(r3.isEmpty, "connected once")
        let r4 = m.readStep(from: .client, destinationPending: 0)
        #expect(r4 == .read)
    }

    @Test func theConnectDeadlineFailsTheTunnelOnce() {
        var m = TunnelStateMachine(limit: limit, idleTimeoutSeconds: 60, connectDeadline: 30 * second)
        let t0 = m.tick(now: 30 * second, clientPending: 0, upstreamPending: 0, clientLastSend: 0, upstreamLastSend: 0)
        #expect(t0.isEmpty, "not past the deadline yet")
        let t1 = m.tick(now: 31 * second, clientPending: 0, upstreamPending: 0, clientLastSend: 0, upstreamLastSend: 0)
        #expect(t1 == [.connectTimedOut])
        let r5 = m.connectFailed()
        #expect(r5)
        #expect(m.isClosed)
        let r6 = m.connectFailed()
        #expect(!r6, "answered once")
        let t2 = m.tick(now: 32 * second, clientPending: 0, upstreamPending: 0, clientLastSend: 0, upstreamLastSend: 0)
        #expect(t2.isEmpty)
    }

    @Test func aFailedConnectAfterTheTunnelWasClosedIsNotAnswered() {
        var m = TunnelStateMachine(limit: limit, idleTimeoutSeconds: 60, connectDeadline: 30 * second)
        let r7 = m.close()
        #expect(r7)
        let r8 = m.connectFailed()
        #expect(!r8)
        let r9 = m.connected(now: 1)
        #expect(r9.isEmpty, "a late connect does nothing")
    }

    @Test func theClientLeavingBeforeTheConnectEndsTheTunnel() {
        var m = TunnelStateMachine(limit: limit, idleTimeoutSeconds: 60, connectDeadline: 30 * second)
        let r10 = m.eof(from: .client, clientPending: 0, upstreamPending: 0)
        #expect(r10 == [.close])
        #expect(m.isClosed)
    }

    @Test func clientEOFFirstThenUpstreamEOF() {
        var m = connected()
        let a1 = m.eof(from: .client, clientPending: 0, upstreamPending: 0)
        #expect(a1 == [.pauseReading(.client), .shutdownWrite(.upstream)])
        #expect(m.state == .halfClosed(ended: .client, other: .flowing))
        let r11 = m.readStep(from: .client, destinationPending: 0)
        #expect(r11 == .stop)
        let r12 = m.readStep(from: .upstream, destinationPending: 0)
        #expect(r12 == .read, "the other way still runs")
        let r13 = m.eof(from: .client, clientPending: 0, upstreamPending: 0)
        #expect(r13.isEmpty, "one end per side")
        let a2 = m.eof(from: .upstream, clientPending: 0, upstreamPending: 0)
        #expect(a2 == [.pauseReading(.upstream), .shutdownWrite(.client), .close])
        #expect(m.isClosed)
    }

    @Test func upstreamEOFFirstThenClientEOF() {
        var m = connected()
        let a1 = m.eof(from: .upstream, clientPending: 0, upstreamPending: 0)
        #expect(a1 == [.pauseReading(.upstream), .shutdownWrite(.client)])
        #expect(m.state == .halfClosed(ended: .upstream, other: .flowing))
        let r14 = m.readStep(from: .client, destinationPending: 0)
        #expect(r14 == .read)
        let a2 = m.eof(from: .client, clientPending: 0, upstreamPending: 0)
        #expect(a2 == [.pauseReading(.client), .shutdownWrite(.upstream), .close])
    }

    @Test func eofWhileTheOtherSideHasPendingBytesDrainsFirst() {
        var m = connected()
        _ = m.eof(from: .upstream, clientPending: 50, upstreamPending: 0)
        let a = m.eof(from: .client, clientPending: 50, upstreamPending: 0)
        #expect(a == [.pauseReading(.client), .shutdownWrite(.upstream)], "the client still has bytes to take")
        #expect(m.state == .draining)
        let r15 = m.drained(.client, clientPending: 10, upstreamPending: 0)
        #expect(r15.isEmpty)
        let r16 = m.drained(.client, clientPending: 0, upstreamPending: 0)
        #expect(r16 == [.close])
        #expect(m.isClosed)
    }

    @Test func aDrainingTunnelWhoseDrainEventWasLostClosesOnTheTick() {
        var m = connected()
        _ = m.eof(from: .client, clientPending: 0, upstreamPending: 20)
        _ = m.eof(from: .upstream, clientPending: 0, upstreamPending: 20)
        #expect(m.state == .draining)
        let a = m.tick(
            now: 11 * second, clientPending: 0, upstreamPending: 0, clientLastSend: 0, upstreamLastSend: 0)
        #expect(a == [.close])
    }

    @Test func aSlowReaderHoldsTheOtherSideUntilItDrains() {
        var m = connected()
        // The upstream sends faster than the client reads: its bytes queue for the client up to the limit.
        let r17 = m.readStep(from: .upstream, destinationPending: limit - 1)
        #expect(r17 == .read)
        m.relayed(now: 11 * second)
        let r18 = m.readStep(from: .upstream, destinationPending: limit)
        #expect(r18 == .pause)
        #expect(m.state == .open(client: .flowing, upstream: .held))
        let r19 = m.readStep(from: .upstream, destinationPending: 0)
        #expect(r19 == .stop, "held until a drain")
        let r20 = m.readStep(from: .client, destinationPending: 0)
        #expect(r20 == .read, "the other way is not held")
        // The upstream's own queue draining does not release the client-bound direction.
        let r21 = m.drained(.upstream, clientPending: limit, upstreamPending: 0)
        #expect(r21.isEmpty)
        let a = m.drained(.client, clientPending: 10, upstreamPending: 0)
        #expect(a == [.resumeReading(.upstream)])
        #expect(m.state == .open(client: .flowing, upstream: .flowing))
        let r22 = m.drained(.client, clientPending: 0, upstreamPending: 0)
        #expect(r22.isEmpty, "resumed once")
    }

    @Test func aSlowUpstreamHoldsTheClient() {
        var m = connected()
        let r23 = m.readStep(from: .client, destinationPending: limit + 5)
        #expect(r23 == .pause)
        #expect(m.state == .open(client: .held, upstream: .flowing))
        let r24 = m.drained(.upstream, clientPending: 0, upstreamPending: 0)
        #expect(r24 == [.resumeReading(.client)])
    }

    @Test func aHeldDirectionWhoseDrainEventWasLostResumesOnTheTick() {
        var m = connected()
        _ = m.readStep(from: .upstream, destinationPending: limit)
        _ = m.readStep(from: .client, destinationPending: limit)
        let still = m.tick(
            now: 12 * second, clientPending: limit, upstreamPending: limit, clientLastSend: 0, upstreamLastSend: 0)
        #expect(still.isEmpty, "both queues still full")
        let a = m.tick(
            now: 13 * second, clientPending: 0, upstreamPending: 0, clientLastSend: 0, upstreamLastSend: 0)
        #expect(a == [.resumeReading(.upstream), .resumeReading(.client)])
    }

    @Test func aHalfClosedTunnelStillHoldsAndResumesTheDirectionThatRuns() {
        var m = connected()
        _ = m.eof(from: .client, clientPending: 0, upstreamPending: 0)
        let r25 = m.readStep(from: .upstream, destinationPending: limit)
        #expect(r25 == .pause)
        #expect(m.state == .halfClosed(ended: .client, other: .held))
        let r26 = m.drained(.client, clientPending: 0, upstreamPending: 0)
        #expect(r26 == [.resumeReading(.upstream)])
        #expect(m.state == .halfClosed(ended: .client, other: .flowing))
    }

    @Test func theIdleTimeoutCountsRelayedBytesAndSendProgress() {
        var m = connected()
        let early = m.tick(
            now: 69 * second, clientPending: 0, upstreamPending: 0, clientLastSend: 0, upstreamLastSend: 0)
        #expect(early.isEmpty, "60 s after the connect not passed yet")
        m.relayed(now: 65 * second)
        let later = m.tick(
            now: 100 * second, clientPending: 0, upstreamPending: 0, clientLastSend: 0, upstreamLastSend: 0)
        #expect(later.isEmpty, "bytes moved at 65 s")
        // A slow reader that keeps taking bytes is not idle.
        let slow = m.tick(
            now: 150 * second, clientPending: 5, upstreamPending: 0, clientLastSend: 140 * second,
            upstreamLastSend: 0)
        #expect(slow.isEmpty)
        let idle = m.tick(
            now: 201 * second, clientPending: 5, upstreamPending: 0, clientLastSend: 140 * second,
            upstreamLastSend: 0)
        #expect(idle == [.close])
        #expect(m.isClosed)
    }

    @Test func aHalfClosedTunnelWhoseOtherSideNeverFinishesEndsWhenIdle() {
        var m = connected()
        _ = m.eof(from: .client, clientPending: 0, upstreamPending: 0)
        let a = m.tick(
            now: 71 * second, clientPending: 0, upstreamPending: 0, clientLastSend: 0, upstreamLastSend: 0)
        #expect(a == [.close])
    }

    @Test func aFailureClosesOnceAndStopsEverything() {
        var m = connected()
        let r27 = m.failed()
        #expect(r27 == [.close])
        let r28 = m.failed()
        #expect(r28.isEmpty)
        let r29 = m.close()
        #expect(!r29)
        let r30 = m.readStep(from: .client, destinationPending: 0)
        #expect(r30 == .stop)
        let r31 = m.eof(from: .upstream, clientPending: 0, upstreamPending: 0)
        #expect(r31.isEmpty)
        let r32 = m.drained(.client, clientPending: 0, upstreamPending: 0)
        #expect(r32.isEmpty)
        let t = m.tick(
            now: 1000 * second, clientPending: 0, upstreamPending: 0, clientLastSend: 0, upstreamLastSend: 0)
        #expect(t.isEmpty)
    }

    @Test func closingFromOutsideReportsWhetherItWasRunning() {
        var m = connected()
        let r33 = m.close()
        #expect(r33)
        let r34 = m.close()
        #expect(!r34)
        #expect(m.isClosed)
    }
}
