import Testing

@testable import AuthProxyCore

/// The exchange's sub-machines one by one, without the top machine: each holds its own state and changes it only
/// through its events.
@Suite struct ExchangeRequestBodyTests {
    typealias RequestBody = ExchangeStateMachine.RequestBody

    @Test func aStreamedBodyEndsComplete() {
        var b = RequestBody.streaming
        #expect(!b.isComplete)
        b.finished()
        #expect(b.isComplete)
        #expect(b == .complete)
    }

    @Test func onlyABodyStillComingIsCollectedAsAForm() {
        var complete = RequestBody.complete
        #expect(complete.collectForm() == false)
        #expect(!complete.isCollectingForm)
        var streaming = RequestBody.streaming
        #expect(streaming.collectForm() == true)
        #expect(streaming.isCollectingForm)
        streaming.finished()
        #expect(streaming.isComplete && !streaming.isCollectingForm)
    }
}

@Suite struct ExchangeResponseHoldTests {
    typealias Response = ExchangeStateMachine.Response
    static let plain = ResponseFraming(noBody: false, chunked: false, contentLength: 10, keepAlive: true)
    static let empty = ResponseFraming(noBody: true, chunked: false, contentLength: nil, keepAlive: true)

    @Test(arguments: [
        (ExchangeStateMachine.Inspection.none, ExchangeStateMachine.CommitStep.ready, false),
        (.holdBody, .hold, true),
        (.rejectedByStatus, .rejected, true),
    ])
    func aCommittedHeadIsReadyOrHeld(
        inspection: ExchangeStateMachine.Inspection, step: ExchangeStateMachine.CommitStep, holds: Bool
    ) {
        var r = Response.none
        #expect(r.awaitsHead)
        #expect(r.commit(Self.plain, inspection: inspection) == step)
        #expect(r.isHolding == holds)
        #expect(r.framing == Self.plain)
        #expect(!r.hasBegun)
        #expect(r.preparationForEnd == (holds ? .inspectHeld : .none))
    }

    @Test func bodyBytesBeforeAHeadAskForItsCommit() {
        var r = Response.none
        #expect(r.preparationForEnd == .commitHead)
        #expect(r.body(count: 1, clientFailed: false, full: false) == .commitHeadFirst)
    }

    /// Held up to the look-ahead; past it, the held bytes go out with the ones that overflowed it.
    @Test func aHoldIsReleasedWhenItOverflows() {
        var r = Response.none
        _ = r.commit(Self.plain, inspection: .holdBody)
        #expect(r.body(count: ExchangeStateMachine.lookAhead - 1, clientFailed: false, full: true) == .hold)
        #expect(
            r.body(count: 2, clientFailed: false, full: true) == .writeHeld(bytes: ExchangeStateMachine.lookAhead - 1))
        #expect(r.hasBegun)
        #expect(r.body(count: 2, clientFailed: false, full: true) == .pause)
        #expect(r.body(count: 2, clientFailed: true, full: false) == .abort)
    }

    @Test func anEmptyHoldOverflowingWritesTheBytes() {
        var r = Response.none
        _ = r.commit(Self.plain, inspection: .holdBody)
        #expect(r.body(count: ExchangeStateMachine.lookAhead + 1, clientFailed: false, full: false) == .write)
    }

    @Test func aResponseWithoutBodyDropsBytesAndAlwaysFlows() {
        var r = Response.none
        _ = r.commit(Self.empty, inspection: .none)
        #expect(r.mayFlow(full: true))
        #expect(r.body(count: 3, clientFailed: false, full: true) == .discard)
        #expect(!r.hasBegun)
    }

    @Test func aFullClientStopsAFilterFromTakingBytes() {
        var r = Response.none
        _ = r.commit(Self.plain, inspection: .none)
        #expect(!r.mayFlow(full: true))
        #expect(r.mayFlow(full: false))
    }

    @Test(arguments: [
        (0, true, ExchangeStateMachine.ReleaseStep.flushHead), (0, false, .keep), (5, true, .writeHeld(bytes: 5)),
    ])
    func aReleasedHoldWritesWhatItHeld(held: Int, transferLive: Bool, expected: ExchangeStateMachine.ReleaseStep) {
        var r = Response.none
        _ = r.commit(Self.plain, inspection: .holdBody)
        if held > 0 { _ = r.body(count: held, clientFailed: false, full: false) }
        #expect(r.release(transferLive: transferLive) == expected)
        #expect(!r.isHolding)
        #expect(r.release(transferLive: transferLive) == .keep)
    }

    @Test func aFailureCutsOnlyAnAnswerThatBegan() {
        var ready = Response.none
        _ = ready.commit(Self.plain, inspection: .none)
        #expect(ready.fail() == false)
        #expect(ready == .none)
        var streaming = Response.none
        _ = streaming.commit(Self.plain, inspection: .none)
        _ = streaming.body(count: 1, clientFailed: false, full: false)
        #expect(streaming.fail() == true)
        #expect(streaming.hasBegun)
    }

    @Test func onlyACommittedAnswerCompletes() {
        var r = Response.none
        #expect(r.complete() == nil)
        _ = r.commit(Self.plain, inspection: .holdBody)
        #expect(r.complete() == nil)
        _ = r.release(transferLive: false)
        #expect(r.complete() == Self.plain)
        #expect(r.hasBegun)
        #expect(r.complete() == nil)
    }
}

@Suite struct ExchangeUpstreamAttemptTests {
    typealias Upstream = ExchangeStateMachine.Upstream

    @Test func theTokenRetryIsTheSecondAttempt() {
        var u = Upstream.none
        u.tokenRequested()
        #expect(u.attempt == 1)
        u.transferStarted(inspect: true, now: 0)
        #expect(u.takeInspection() == true)
        #expect(u.takeInspection() == false)
        u.rejected(retry: true)
        #expect(u.phase == .retryScheduled)
        #expect(u.attempt == 2)
        u.tokenRequested()
        u.transferStarted(inspect: true, now: 1)
        #expect(u.attempt == 2)
    }

    @Test func aBackoffKeepsTheTokenAttemptAndCountsOnlyRetries() {
        var u = Upstream.none
        #expect(u.backOff(countsAsRetry: true) == false)
        u.rejected(retry: true)
        u.tokenRequested()
        u.transferStarted(inspect: false, now: 0)
        #expect(u.backOff(countsAsRetry: false) == true)
        #expect(u.retries == 0)
        #expect(u.isBackingOff)
        u.transferStarted(inspect: false, now: 1)
        #expect(u.backOff(countsAsRetry: true) == true)
        #expect(u.retries == 1)
        #expect(u.attempt == 2)
        u.finish()
        #expect(u.retries == 1)
        #expect(!u.isTransferring)
    }

    @Test func pausesAreResumedOnce() {
        var u = Upstream.none
        #expect(u.clientDrained(now: 0) == false)
        u.transferStarted(inspect: false, now: 0)
        u.pausedForClient(now: 5)
        #expect(u.transfer?.lastProgress == 5)
        #expect(u.clientDrained(now: 6) == true)
        #expect(u.clientDrained(now: 7) == false)
        u.waitingForBody()
        #expect(u.bodyArrived(now: 8) == true)
        #expect(u.bodyArrived(now: 9) == false)
        #expect(u.transfer?.lastProgress == 8)
    }

    @Test func aStallIsOnlyCountedWhileTheTransferIsReady() {
        var u = Upstream.none
        u.transferStarted(inspect: false, now: 0)
        let t = ExchangeStateMachine.Timers.self
        #expect(t.upstreamStalled(u.transfer!, now: 31, limit: 30))
        #expect(!t.upstreamStalled(u.transfer!, now: 30, limit: 30))
        u.pausedForClient(now: 0)
        #expect(!t.upstreamStalled(u.transfer!, now: 100, limit: 30))
        _ = u.clientDrained(now: 0)
        u.waitingForBody()
        #expect(!t.upstreamStalled(u.transfer!, now: 100, limit: 30))
    }
}

@Suite struct ExchangeTimersTests {
    typealias Timers = ExchangeStateMachine.Timers
    static let limits = ExchangeStateMachine.Limits(
        headerTimeout: 10, idleTimeout: 60, upstreamTimeout: 30, linger: 2, lingerTotal: 30, shutdownQuiet: 1)

    @Test func silenceIsCountedFromTheLaterOfProgressAndAPhaseStart() {
        var t = Timers(now: 0)
        #expect(t.clientSilent(now: 11, longerThan: 10))
        #expect(!t.clientSilent(now: 11, since: 5, longerThan: 10))
        t.clientProgress(now: 8)
        #expect(!t.clientSilent(now: 11, longerThan: 10))
        #expect(!t.clientStalled(now: 100, lastSendProgress: 50, limit: 60))
        #expect(t.clientStalled(now: 111, lastSendProgress: 50, limit: 60))
    }

    @Test func shutdownBeginsOnce() {
        var t = Timers(now: 0)
        #expect(!t.shutdownQuietOver(now: 100, quiet: 1))
        #expect(t.shutdownBegan(now: 10) == true)
        #expect(t.shutdownBegan(now: 20) == false)
        #expect(t.shutdownSince == 10)
        #expect(!t.shutdownQuietOver(now: 10, quiet: 1))
        #expect(t.shutdownQuietOver(now: 11, quiet: 1))
    }

    /// A closing connection: a client not reading its last response is cut after the idle limit; once flushed,
    /// input is dropped up to the linger time of quiet and the total linger time.
    @Test(arguments: [
        (5, UInt64(50), false), (5, 61, true),  // still sending: idle limit from the last send
        (0, 2, false), (0, 3, true),  // flushed: quiet over the linger time
    ])
    func lingerEnds(clientPending: Int, now: UInt64, over: Bool) {
        let t = Timers(now: 0)
        #expect(
            t.lingerOver(since: 0, now: now, clientPending: clientPending, lastSendProgress: 0, limits: Self.limits)
                == over)
    }

    @Test func aClientThatKeepsSendingLingersAtMostTheTotal() {
        var t = Timers(now: 0)
        t.clientProgress(now: 30)
        #expect(!t.lingerOver(since: 0, now: 30, clientPending: 0, lastSendProgress: 0, limits: Self.limits))
        t.clientProgress(now: 31)
        #expect(t.lingerOver(since: 0, now: 31, clientPending: 0, lastSendProgress: 0, limits: Self.limits))
    }
}
