import Testing

@testable import AuthProxyCore

/// Which admin connection makes room for a new one.
@Suite struct AdminConnectionSlotsTests {
    let slots = AdminConnectionSlots(total: 4, perAddress: 2)
    let a = IPAddress.parse("127.0.0.1")!
    let b = IPAddress.parse("127.0.0.2")!
    let c = IPAddress.parse("10.0.0.9")!

    func open(_ list: [(Int32, IPAddress, Bool)]) -> [AdminConnectionSlots.Open] {
        list.map { .init(id: $0.0, peer: $0.1, sequence: UInt64($0.0), reading: $0.2) }
    }

    @Test func admitsUnderBothLimits() {
        #expect(slots.decide(peer: a, open: []) == .admit)
        #expect(slots.decide(peer: a, open: open([(1, a, true), (2, b, true)])) == .admit)
    }

    @Test func anAddressAtItsLimitEvictsItsOwnOldestStillReading() {
        let o = open([(1, b, true), (2, a, false), (3, a, true)])
        // 1 is older but belongs to another address; 2 is being answered.
        #expect(slots.decide(peer: a, open: o) == .admitEvicting(3))
        #expect(slots.decide(peer: a, open: open([(2, a, false), (3, a, false)])) == .refuse)
    }

    @Test func theTotalLimitEvictsTheOldestStillReading() {
        let o = open([(1, a, false), (2, b, true), (3, a, true), (4, b, true)])
        #expect(slots.decide(peer: c, open: o) == .admitEvicting(2))
        #expect(
            slots.decide(peer: c, open: open([(1, a, false), (2, b, false), (3, a, false), (4, b, false)])) == .refuse)
    }
}
