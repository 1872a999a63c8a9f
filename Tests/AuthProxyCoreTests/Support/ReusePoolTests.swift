import Testing

@testable import AuthProxyCore

private final class Thing {
    let id: Int
    init(_ id: Int) { self.id = id }
}

/// Makes numbered objects and counts how many it made.
private struct Maker {
    var made = 0
    mutating func make() -> Thing {
        made += 1
        return Thing(made)
    }
}

@Suite struct ReusePoolTests {
    @Test func reusesWhatWasGivenBackInsteadOfMaking() {
        var pool = ReusePool<Thing>(capacity: 4)
        var maker = Maker()
        let a = pool.take { maker.make() }
        #expect(maker.made == 1)
        let kept = pool.give(a)
        #expect(kept)
        let b = pool.take { maker.make() }
        #expect(b === a)
        #expect(maker.made == 1)
        #expect(pool.count == 0)
    }

    @Test func lastGivenIsFirstTaken() {
        var pool = ReusePool<Thing>(capacity: 4)
        let a = Thing(1), b = Thing(2)
        pool.give(a)
        pool.give(b)
        #expect(pool.take { Thing(0) } === b)
        #expect(pool.take { Thing(0) } === a)
        #expect(pool.take { Thing(0) }.id == 0)
    }

    @Test func keepsAtMostItsCapacity() {
        var pool = ReusePool<Thing>(capacity: 2)
        let kept = [pool.give(Thing(1)), pool.give(Thing(2)), pool.give(Thing(3))]
        #expect(kept == [true, true, false])
        #expect(pool.count == 2)
    }

    @Test func anIdlePoolIsEmptyAfterTwoTrims() {
        var pool = ReusePool<Thing>(capacity: 8)
        for i in 0..<5 { pool.give(Thing(i)) }
        pool.trim()  // given back during this period: they were in use, kept
        #expect(pool.count == 5)
        pool.trim()  // a whole period unused
        #expect(pool.count == 0)
    }

    @Test func trimKeepsWhatWasInUseDuringThePeriod() {
        var pool = ReusePool<Thing>(capacity: 8)
        for i in 0..<6 { pool.give(Thing(i)) }
        pool.trim()
        #expect(pool.count == 6)
        // A period in which at most 2 were out at once: the other 4 sat unused throughout.
        var out = [pool.take { Thing(-1) }, pool.take { Thing(-1) }]
        pool.give(out.removeLast())
        out.append(pool.take { Thing(-1) })
        for o in out { pool.give(o) }
        pool.trim()
        #expect(pool.count == 2)
        // Next period: both used again, so both stay.
        let x = pool.take { Thing(-1) }, y = pool.take { Thing(-1) }
        pool.give(x)
        pool.give(y)
        pool.trim()
        #expect(pool.count == 2)
    }

    @Test func objectsMadeWhenEmptyDoNotCountAsIdle() {
        var pool = ReusePool<Thing>(capacity: 8)
        pool.trim()
        var maker = Maker()
        let made = (0..<3).map { _ in pool.take { maker.make() } }
        #expect(maker.made == 3)
        for o in made { pool.give(o) }
        pool.trim()
        #expect(pool.count == 3)
    }
}
