/// A free list of objects that are expensive to make and reset cheaply, held by one event loop (so not locked).
///
/// Objects come back with ``give(_:)`` and are handed out again last-in first-out by ``take(orMake:)``, so a
/// busy loop allocates nothing per use. What nobody needs goes away by itself: ``trim()``, called once a period
/// (the loop's one-second sweep), drops as many objects as stayed in the pool the whole period (the fewest it
/// held since the last trim). An idle loop therefore keeps none after two periods, and a busy one keeps about
/// as many as it had in use at once. At most ``capacity`` are kept; more given back are dropped.
///
/// A value confined to its owner's queue.
struct ReusePool<Object: AnyObject> {
    let capacity: Int
    private var free: [Object] = []
    /// The fewest objects held since the last trim: that many were not needed during the whole period.
    private var lowWater = 0

    init(capacity: Int) {
        precondition(capacity > 0)
        self.capacity = capacity
    }

    /// Objects waiting to be used again.
    var count: Int { free.count }

    /// A pooled object, or a new one from `make` when the pool is empty.
    @inline(__always)
    mutating func take(orMake make: () -> Object) -> Object {
        guard let o = free.popLast() else { return make() }
        if free.count < lowWater { lowWater = free.count }
        return o
    }

    /// Keeps `object` for a later ``take(orMake:)`` (the caller has reset it); false when the pool is full and the
    /// object was not kept.
    @discardableResult
    mutating func give(_ object: Object) -> Bool {
        guard free.count < capacity else { return false }
        free.append(object)
        return true
    }

    /// End of a period: drops the objects that stayed unused through all of it.
    mutating func trim() {
        if lowWater > 0 { free.removeLast(lowWater) }
        if free.isEmpty, free.capacity > 0 { free = [] }
        lowWater = free.count
    }
}
