import Testing

@testable import AuthProxyCore

@Suite struct PollRegistryTests {
    private final class Thing {}

    @Test func aRemovedObjectsTokenFindsNothingEvenOnceItsSlotIsReused() {
        var r = PollRegistry<Thing>()
        let a = Thing()
        let b = Thing()
        let ta = r.insert(a)
        #expect(ta != 0)
        #expect(r[ta] === a)
        r.remove(ta)
        #expect(r[ta] == nil)
        let tb = r.insert(b)
        // Same slot, new generation: an event fetched for `a` before it was removed is dropped.
        #expect(tb & 0xffff_ffff == ta & 0xffff_ffff)
        #expect(tb != ta)
        #expect(r[ta] == nil)
        #expect(r[tb] === b)
        #expect(r.count == 1)
        r.remove(ta)
        #expect(r[tb] === b)
        #expect(r.count == 1)
    }

    @Test func tokensOfLiveObjectsAreDistinctAndUnknownOnesFindNothing() {
        var r = PollRegistry<Thing>()
        let things = (0..<100).map { _ in Thing() }
        let tokens = things.map { r.insert($0) }
        #expect(Set(tokens).count == 100)
        for (t, thing) in zip(tokens, things) { #expect(r[t] === thing) }
        #expect(r[0] == nil)
        #expect(r[UInt64(1) << 32 | 5000] == nil)
        for t in tokens { r.remove(t) }
        #expect(r.count == 0)
    }
}
