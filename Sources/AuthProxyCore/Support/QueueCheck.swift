import Dispatch

/// Checks that the caller runs on `queue`, the rule every queue-confined type in this module states in its
/// doc comment. Debug builds (which the end-to-end suite runs) trap on a violation; release builds skip the
/// check, because it would sit on the per-request path.
@inline(__always)
func assertOnQueue(_ queue: DispatchQueue) {
    #if DEBUG
        dispatchPrecondition(condition: .onQueue(queue))
    #endif
}
