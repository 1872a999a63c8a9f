import Testing

@testable import AuthProxyCore

/// Which heads of a libcurl transfer through a parent are the parent's: its 407s counted, its CONNECT answer, and
/// where its part ends (the connection ready through a tunnel, the first other head in absolute form).
@Suite struct ParentExchangeHeadsTests {
    enum Event {
        case head(Int)
        case ready
        /// Ready on a connection libcurl had open.
        case readyReused
        case end
    }

    /// Feeds `events` in order; what each answered (whether it ended the parent's part).
    static func feed(_ h: inout ParentExchangeHeads, _ events: [Event]) -> [Bool] {
        events.map { e in
            switch e {
            case .head(let status): return h.statusLine(status)
            case .ready: return h.connectionReady(opened: true)
            case .readyReused: return h.connectionReady(opened: false)
            case .end: return h.transferEnded()
            }
        }
    }

    @Test func aTunnelsLoginCountsEach407AndEndsWhenTheConnectionIsReady() {
        var h = ParentExchangeHeads(tunnel: true)
        #expect(h.readsConnectAnswer)
        // NTLM: the first 407 offers the scheme, the second carries the challenge, then the tunnel.
        #expect(Self.feed(&h, [.head(407), .head(407), .head(200)]) == [false, false, false])
        #expect(h.challenges == 2 && h.connectStatus == 200)
        #expect(Self.feed(&h, [.ready]) == [true])
        #expect(!h.readsConnectAnswer && !h.reused)
        // The destination's heads are not the parent's, and the part ends once.
        #expect(Self.feed(&h, [.head(200), .ready, .head(407), .end]) == [false, false, false, false])
        #expect(h.challenges == 2 && h.connectStatus == 200)
    }

    @Test func aTunnelReadyWithoutAConnectionOfItsOwnWasReused() {
        var h = ParentExchangeHeads(tunnel: true)
        #expect(Self.feed(&h, [.readyReused]) == [true])
        #expect(h.reused && h.challenges == 0 && h.connectStatus == 0)
        // A SOCKS parent answers no head: a new connection through it is no reuse.
        var socks = ParentExchangeHeads(tunnel: true)
        #expect(Self.feed(&socks, [.ready]) == [true])
        #expect(!socks.reused)
    }

    @Test func aRefusedConnectIsEndedByTheTransfer() {
        var h = ParentExchangeHeads(tunnel: true)
        #expect(Self.feed(&h, [.head(407), .head(407), .end, .end, .ready]) == [false, false, true, false, false])
        #expect(h.challenges == 2 && h.connectStatus == 407)
    }

    @Test func absoluteFormEndsAtTheFirstHeadThatIsNotA407() {
        var h = ParentExchangeHeads(tunnel: false)
        #expect(!h.readsConnectAnswer)
        // The request goes out, meets a 407, goes again with the login, and the origin's answer comes through.
        #expect(Self.feed(&h, [.ready, .head(407), .ready, .head(200)]) == [false, false, false, true])
        #expect(h.challenges == 1 && h.connectStatus == 0 && !h.reused)
        #expect(Self.feed(&h, [.head(407), .end]) == [false, false])
        #expect(h.challenges == 1)
    }

    @Test func absoluteFormRefusedToTheEnd() {
        var h = ParentExchangeHeads(tunnel: false)
        #expect(Self.feed(&h, [.ready, .head(407), .ready, .head(407), .end]) == [false, false, false, false, true])
        #expect(h.challenges == 2)
    }
}
