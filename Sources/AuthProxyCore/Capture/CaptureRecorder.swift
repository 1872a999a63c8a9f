import Dispatch
import Synchronization

/// The capture window in progress, for the whole process: which credential it records, until when, and the
/// entries so far (already redacted: ``CaptureEntryBuilder`` builds them before they get here).
///
/// One capture at a time: a support case is one credential's traffic over a minute or so, and a second window
/// asked for meanwhile is refused (409) rather than mixed into the first. Bounded: at most ``maxEntries`` entries
/// and about ``maxBytes`` of them; past either, entries are counted but not kept, and the file's comment says how
/// many were left out.
///
/// The hooks on the request path read ``isActive`` first: with no capture running that is one relaxed atomic load.
final class CaptureRecorder: Sendable {
    init() {}

    static let shared = CaptureRecorder()

    static let maxEntries = 2000
    static let maxBytes = 32 * 1024 * 1024
    /// The longest window `seconds` may ask for.
    static let maxSeconds = 600

    private let active = Atomic<Bool>(false)
    private let state = Mutex(State())

    private struct State {
        var session: Session?
        var nextExchange = 0
        var nextSession: UInt64 = 0
    }

    private struct Session {
        var id: UInt64
        var credential: String
        var seconds: Int
        var startedMillis: Int64
        var entries: [(started: Int64, order: Int, entry: HAR.Entry)] = []
        var bytes = 0
        var dropped = 0
        var done: @Sendable (HAR.Document) -> Void
    }

    /// A capture is running (whatever its credential).
    var isActive: Bool { active.load(ordering: .relaxed) }

    /// Whether exchanges of `credential` are being recorded now.
    func records(_ credential: String?) -> Bool {
        guard isActive, let credential else { return false }
        return state.withLock { $0.session?.credential == credential }
    }

    /// A number for a new exchange, shared by its attempts' entries.
    func nextExchange() -> Int {
        state.withLock {
            $0.nextExchange += 1
            return $0.nextExchange
        }
    }

    /// Why a capture cannot start now.
    struct Busy: Error, Equatable {
        var credential: String
    }

    /// Starts recording `credential` for `seconds`; `done` gets the document when the window ends (on a global
    /// queue), or when ``stop(session:)`` ends it early. Returns the session's id, or ``Busy`` while another
    /// capture runs.
    func start(
        credential: String, seconds: Int, nowMillis: Int64, done: @escaping @Sendable (HAR.Document) -> Void
    ) -> Result<UInt64, Busy> {
        let started: Result<UInt64, Busy> = state.withLock { s in
            if let running = s.session { return .failure(Busy(credential: running.credential)) }
            s.nextSession += 1
            s.session = Session(
                id: s.nextSession, credential: credential, seconds: seconds, startedMillis: nowMillis, done: done)
            return .success(s.nextSession)
        }
        guard case .success(let id) = started else { return started }
        active.store(true, ordering: .relaxed)
        DispatchQueue.global().asyncAfter(deadline: .now() + .seconds(seconds)) { [self] in stop(session: id) }
        return started
    }

    /// Ends session `id` if it still runs (its window is over, or whoever asked for it left) and hands its
    /// document to the waiting caller.
    func stop(session id: UInt64) {
        let ended: Session? = state.withLock { s in
            guard let session = s.session, session.id == id else { return nil }
            s.session = nil
            return session
        }
        guard let ended else { return }
        active.store(false, ordering: .relaxed)
        ended.done(Self.document(ended))
    }

    /// Adds an entry for `credential` if its window is still open; kept only within the caps.
    func record(_ entry: HAR.Entry, startedMillis: Int64) {
        let size = Self.estimatedSize(entry)
        state.withLock { s in
            guard var session = s.session, session.credential == entry.authproxy.credential else { return }
            s.session = nil  // edited in place without a copy of the entries
            if session.entries.count >= Self.maxEntries || session.bytes + size > Self.maxBytes {
                session.dropped += 1
            } else {
                session.entries.append((startedMillis, session.entries.count, entry))
                session.bytes += size
            }
            s.session = session
        }
    }

    private static func document(_ s: Session) -> HAR.Document {
        let entries = s.entries.sorted { ($0.started, $0.order) < ($1.started, $1.order) }.map(\.entry)
        var comment =
            "authproxy capture of credential '\(s.credential)', \(s.seconds) s from \(rfc3339(millis: s.startedMillis)); "
            + "secrets replaced by [redacted:credential NAME] or [redacted]"
        if s.dropped > 0 {
            comment +=
                "; \(s.dropped) entries not recorded: the capture keeps at most \(maxEntries) entries and "
                + "\(maxBytes / 1024 / 1024) MiB"
        }
        return HAR.Document(
            log: HAR.Log(
                creator: HAR.Creator(name: "authproxy", version: AuthProxyVersion.string), entries: entries,
                comment: comment))
    }

    /// About how many bytes the entry takes in the file.
    static func estimatedSize(_ e: HAR.Entry) -> Int {
        func request(_ r: HAR.Request?) -> Int {
            guard let r else { return 0 }
            return r.url.utf8.count + r.headers.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 24 }
                + (r.postData?.text.utf8.count ?? 0) + 256
        }
        return request(e.request) + request(e.clientRequest) + (e.response.content.text?.utf8.count ?? 0)
            + e.response.headers.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 24 } + 512
    }
}
