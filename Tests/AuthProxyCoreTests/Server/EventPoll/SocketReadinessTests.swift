import CAuthProxyShims
import Testing

@testable import AuthProxyCore

/// The edge-to-level bookkeeping of a channel: what is delivered after an event, a read, a send, a pause, a resume.
@Suite struct SocketReadinessTests {
    @Test func inputIsDeliveredUntilAReadFindsNothingMore() {
        var r = SocketReadiness()
        let due1 = r.resume(bufferedInput: false)
        #expect(!due1)
        r.event(readable: true, writable: false)
        #expect(r.next(readsDelivered: 0) == .read)
        // The owner read once and left bytes: a level-triggered source would fire again.
        #expect(r.next(readsDelivered: 1) == .read)
        r.drained()
        #expect(r.next(readsDelivered: 2) == SocketReadiness.Delivery.none)
    }

    @Test func aChannelThatKeepsInputPendingYieldsAfterItsTurn() {
        var r = SocketReadiness()
        _ = r.resume(bufferedInput: false)
        r.event(readable: true, writable: false)
        #expect(r.next(readsDelivered: SocketReadiness.readsPerTurn - 1) == .read)
        #expect(r.next(readsDelivered: SocketReadiness.readsPerTurn) == .nextTurn)
    }

    @Test func inputThatCameWhilePausedIsDeliveredOnResume() {
        var r = SocketReadiness()
        _ = r.resume(bufferedInput: false)
        r.pause()
        r.event(readable: true, writable: true)
        #expect(r.next(readsDelivered: 0) == SocketReadiness.Delivery.none)
        let due2 = r.resume(bufferedInput: false)
        #expect(due2)
        #expect(r.next(readsDelivered: 0) == .read)
        // Resuming what is already on delivers nothing more.
        let due3 = r.resume(bufferedInput: false)
        #expect(!due3)
    }

    @Test func aResumeWithNothingPendingWaitsForAnEvent() {
        var r = SocketReadiness()
        _ = r.resume(bufferedInput: false)
        r.event(readable: true, writable: false)
        r.drained()
        r.pause()
        let due4 = r.resume(bufferedInput: false)
        #expect(!due4)
        // A layer holding decrypted bytes gets its turn although the socket says nothing.
        r.pause()
        let due5 = r.resume(bufferedInput: true)
        #expect(due5)
    }

    @Test func theEndIsDeliveredOnceAndAgainAfterAPause() {
        var r = SocketReadiness()
        _ = r.resume(bufferedInput: false)
        r.event(readable: true, writable: false)
        r.readEnded()
        // No spinning on EOF while reading stays on.
        #expect(r.next(readsDelivered: 1) == SocketReadiness.Delivery.none)
        r.pause()
        let due6 = r.resume(bufferedInput: false)
        #expect(due6)
        // A later hang-up (a reset after the EOF) is an event like any other.
        r.event(readable: true, writable: true)
        #expect(r.next(readsDelivered: 0) == .read)
    }

    @Test func writesWaitForTheNextWritableEdgeAndGoFirst() {
        var r = SocketReadiness()
        _ = r.resume(bufferedInput: false)
        r.event(readable: false, writable: true)
        // Nothing to write: writability alone delivers nothing.
        #expect(r.next(readsDelivered: 0) == SocketReadiness.Delivery.none)
        r.sendBlocked()
        r.wantWrite(true)
        #expect(r.next(readsDelivered: 0) == SocketReadiness.Delivery.none)
        r.event(readable: true, writable: true)
        #expect(r.next(readsDelivered: 0) == .write)
        r.wantWrite(false)
        #expect(r.next(readsDelivered: 0) == .read)
    }

    @Test func eventMasksAreReadAsInputOutputOrBoth() {
        let i = SocketReadiness.interpret(EPOLLIN.rawValue)
        #expect(i.readable && !i.writable)
        let o = SocketReadiness.interpret(EPOLLOUT.rawValue)
        #expect(!o.readable && o.writable)
        let rdhup = SocketReadiness.interpret(EPOLLRDHUP.rawValue)
        #expect(rdhup.readable && !rdhup.writable)
        // A reset or error is for both sides: the read and the send report it.
        for mask in [EPOLLHUP.rawValue, EPOLLERR.rawValue] {
            let f = SocketReadiness.interpret(mask)
            #expect(f.readable && f.writable)
        }
        #expect(SocketReadiness.registration & EPOLLET.rawValue != 0)
        #expect(SocketReadiness.registration & EPOLLONESHOT.rawValue == 0)
    }
}

extension SocketReadinessTests {
    @Test func aReadThatReturnedBytesLeavesOnlyAGuessForALayer() {
        var r = SocketReadiness()
        _ = r.resume(bufferedInput: false)
        r.event(readable: true, writable: false)
        #expect(r.fresh)
        r.consumed()
        // Still delivered (a plain socket's full read), but no longer known from an event.
        #expect(!r.fresh)
        #expect(r.next(readsDelivered: 1) == .read)
        r.event(readable: true, writable: false)
        #expect(r.fresh)
        r.drained()
        #expect(!r.fresh && !r.readable)
    }
}

extension SocketReadinessTests {
    @Test func anEndThatCameWithTheBytesIsStillDeliveredAfterAShortRead() {
        var r = SocketReadiness()
        _ = r.resume(bufferedInput: false)
        let e = SocketReadiness.interpret(EPOLLIN.rawValue | EPOLLRDHUP.rawValue)
        #expect(e.hungUp)
        r.event(readable: e.readable, writable: e.writable, hungUp: e.hungUp)
        r.shortRead()
        // The bytes were read; the EOF behind them is not announced by another edge.
        #expect(r.next(readsDelivered: 1) == .read)
        r.readEnded()
        #expect(r.next(readsDelivered: 2) == SocketReadiness.Delivery.none)
        // Without a hang-up a short read empties the socket.
        var plain = SocketReadiness()
        _ = plain.resume(bufferedInput: false)
        plain.event(readable: true, writable: false)
        plain.shortRead()
        #expect(plain.next(readsDelivered: 1) == SocketReadiness.Delivery.none)
    }
}
