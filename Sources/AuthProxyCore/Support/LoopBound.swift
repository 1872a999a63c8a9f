import Dispatch

/// A value confined to one queue, carried across a hop Swift cannot check: a `@Sendable` closure that the same
/// queue runs later (a next turn of the loop, the answer of work done off the loop). Every access checks, in debug
/// builds, that it runs on that queue, as swift-nio's `NIOLoopBound` does; a hop that lands on the wrong queue
/// traps in the end-to-end suite instead of racing. Release builds skip the check (it would sit on the request
/// path) and the wrapper costs nothing beyond the queue reference it holds.
struct LoopBound<Value>: @unchecked Sendable {
    let queue: DispatchQueue
    private let stored: Value

    /// Made on `queue`, by the code that owns `value`.
    @inline(__always)
    init(_ value: Value, queue: DispatchQueue) {
        assertOnQueue(queue)
        self.queue = queue
        stored = value
    }

    /// The value, read on its queue.
    @inline(__always)
    var value: Value {
        assertOnQueue(queue)
        return stored
    }
}
