import CAuthProxyShims

#if canImport(Glibc)
    import Glibc
#endif

/// What a ``SocketChannel`` knows about its socket, registered edge-triggered in its loop's epoll set
/// (``EventPoller``), and what it owes its owner.
///
/// An edge-triggered registration reports a change once; the owners were written against level-triggered
/// sources, which fire again while input remains. This keeps that contract: input is *pending* from an event
/// until a read finds nothing more, and while it is pending and reading is on, the channel keeps delivering
/// `channelReadable`. Writability likewise lasts until a send would block. Pure bookkeeping: no socket here.
struct SocketReadiness: Equatable {
    /// Input (or an error) may be waiting: set by an event, cleared by a read that found nothing more.
    private(set) var readable = false
    /// A send may make progress: set by an event, cleared by a send that would block.
    private(set) var writable = false
    /// The owner wants input (``SocketChannel/resumeReading()``).
    private(set) var reading = false
    /// Bytes wait to be written, or a connect is awaited: the next writable moment is for the channel.
    private(set) var wantsWrite = false
    /// A read returned EOF or an error: nothing new will make the socket readable, but an owner that resumes
    /// reading after a pause is told again (as a level-triggered source did), so it sees the end it left unread.
    private(set) var ended = false
    /// An event came since the last read. A layer above the socket (TLS) returns one record per read and its
    /// owner may stop there, so after such a read `readable` is only a guess: the channel looks at the socket
    /// before delivering again (a plain socket needs no look: a short read is `drained()`).
    private(set) var fresh = false
    /// The peer shut its side down, or the socket failed (RDHUP/HUP/ERR seen): the end or the error waits
    /// behind the bytes, and no new edge will announce it once they are read.
    private(set) var hungUp = false

    /// Input deliveries one channel gets in a row within one wake-up of its loop before the others get their turn
    /// (it is then served again on the loop's next turn).
    static let readsPerTurn = 4

    /// What an epoll event mask says: a hang-up or an error is for the reader (its read reports it) and for the
    /// writer (its send reports it).
    static func interpret(_ mask: UInt32) -> (readable: Bool, writable: Bool, hungUp: Bool) {
        let input = EPOLLIN.rawValue | EPOLLPRI.rawValue | EPOLLRDHUP.rawValue
        let failure = EPOLLHUP.rawValue | EPOLLERR.rawValue
        return (
            mask & (input | failure) != 0, mask & (EPOLLOUT.rawValue | failure) != 0,
            mask & (EPOLLRDHUP.rawValue | failure) != 0
        )
    }

    /// The events a socket is registered for, once, for as long as it is open.
    static let registration: UInt32 =
        EPOLLIN.rawValue | EPOLLOUT.rawValue | EPOLLRDHUP.rawValue | EPOLLET.rawValue

    /// Input is pending and wanted.
    var inputDue: Bool { reading && readable }

    mutating func event(readable r: Bool, writable w: Bool, hungUp h: Bool = false) {
        if h { hungUp = true }
        if r {
            readable = true
            fresh = true
        }
        if w { writable = true }
    }

    /// A read found the socket empty (EAGAIN, or a short read of a stream socket: any byte that arrives later is
    /// a new edge).
    mutating func drained() {
        readable = false
        fresh = false
    }

    /// A read returned fewer bytes than asked: the socket is empty, unless the peer's end (or an error) waits
    /// behind them, which only the next read returns.
    mutating func shortRead() {
        if hungUp {
            fresh = false
        } else {
            drained()
        }
    }

    /// A read returned bytes.
    mutating func consumed() { fresh = false }

    /// A read returned EOF or an error: delivering again while reading stays on would only spin.
    mutating func readEnded() {
        readable = false
        fresh = false
        ended = true
    }

    /// A send would block: the next edge says when it can go on.
    mutating func sendBlocked() { writable = false }

    mutating func wantWrite(_ on: Bool) { wantsWrite = on }

    /// Reading goes on. True when input must be delivered without waiting for an event: some is pending (it
    /// came while reading was paused, and its edge is spent), the end was seen, or a layer above the socket holds
    /// decrypted bytes (`bufferedInput`), which no event announces.
    mutating func resume(bufferedInput: Bool) -> Bool {
        guard !reading else { return false }
        reading = true
        return readable || ended || bufferedInput
    }

    mutating func pause() { reading = false }

    enum Delivery: Equatable {
        /// Drain the send queue (or report the connect).
        case write
        /// `channelReadable`.
        case read
        /// Input is still pending but this channel had its turn: serve it again on the loop's next turn.
        case nextTurn
        case none
    }

    /// What to deliver next, `readsDelivered` input deliveries into this wake-up. Writes go first: draining the
    /// send queue is what lets a paused producer go on.
    func next(readsDelivered: Int) -> Delivery {
        if wantsWrite, writable { return .write }
        guard reading, readable else { return .none }
        return readsDelivered < Self.readsPerTurn ? .read : .nextTurn
    }
}
