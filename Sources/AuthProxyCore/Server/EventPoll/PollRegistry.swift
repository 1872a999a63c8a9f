/// The objects registered in one epoll set, each under a token that the kernel hands back with its events
/// (`epoll_event.data.u64`).
///
/// A token is a slot and that slot's generation. Removing an object bumps the generation, so an event for it
/// that is still in the batch being delivered (or a turn scheduled for it) finds nothing, even once the slot
/// and the descriptor number have gone to a new socket: a closed channel never gets an event. Slots are reused,
/// so the table is as large as the most objects registered at once.
struct PollRegistry<Object: AnyObject> {
    private struct Slot {
        var generation: UInt32
        var object: Object?
    }

    private var slots: [Slot] = []
    private var free: [UInt32] = []
    private(set) var count = 0

    /// Registers `object`; its token is never 0.
    mutating func insert(_ object: Object) -> UInt64 {
        count += 1
        if let index = free.popLast() {
            slots[Int(index)].object = object
            return Self.token(index: index, generation: slots[Int(index)].generation)
        }
        slots.append(Slot(generation: 1, object: object))
        return Self.token(index: UInt32(slots.count - 1), generation: 1)
    }

    /// The object registered under `token`, nil once it was removed.
    subscript(token: UInt64) -> Object? {
        let index = Int(truncatingIfNeeded: token & 0xffff_ffff)
        guard index < slots.count, slots[index].generation == UInt32(truncatingIfNeeded: token >> 32) else {
            return nil
        }
        return slots[index].object
    }

    /// Forgets the object under `token`; later look-ups of the token find nothing. Removing twice does nothing.
    mutating func remove(_ token: UInt64) {
        guard self[token] != nil else { return }
        let index = Int(truncatingIfNeeded: token & 0xffff_ffff)
        slots[index].object = nil
        // Generation 0 is skipped so that no token is 0.
        slots[index].generation = slots[index].generation == UInt32.max ? 1 : slots[index].generation + 1
        free.append(UInt32(index))
        count -= 1
    }

    private static func token(index: UInt32, generation: UInt32) -> UInt64 {
        UInt64(generation) << 32 | UInt64(index)
    }
}
