import Synchronization

/// State a credential kind keeps in the token service for its life (an API key's slot book), one value per type:
/// the service holds it without knowing the kinds. Any thread.
final class KindState: Sendable {
    private let values = Mutex<[ObjectIdentifier: any Sendable]>([:])

    /// Runs `body` on the kind's state of type `S` (made with `initial` on first use), under the one lock.
    func withLock<S: Sendable, R>(_ initial: @autoclosure () -> S, _ body: (inout S) -> R) -> R {
        values.withLock { all in
            let id = ObjectIdentifier(S.self)
            var state = all[id] as? S ?? initial()
            // Taken out while `body` runs, so the dictionary does not hold a second reference to copy on write.
            all[id] = nil
            defer { all[id] = state }
            return body(&state)
        }
    }
}
