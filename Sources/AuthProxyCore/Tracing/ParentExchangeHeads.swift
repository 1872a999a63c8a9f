/// Which response heads of a libcurl transfer through a parent proxy are the parent's, for its
/// ``ParentConnectSpan``: the 407s it answered before letting the request through, its answer to the CONNECT, and
/// the moment its part is over. Pure: ``CurlTransfer`` feeds it the status lines its header callback sees and the
/// moment the connection is ready (libcurl's pre-request callback), and ends the span when it says.
///
/// - Through a tunnel (an `https://` upstream, a CONNECT the request asked for, a SOCKS parent) every head before
///   the connection is ready is the parent's answer to the CONNECT; its part ends when the connection is ready.
///   A tunnel taken from libcurl's pool is ready with no exchange with the parent at all (``reused``).
/// - In absolute form (plain `http://` to an `http`/`https` parent) the parent's 407s come where the answer would;
///   its part ends at the first head that is not one.
struct ParentExchangeHeads: Equatable {
    let tunnel: Bool
    /// The parent's 407s so far (each challenge of a login negotiated from them, or a refusal).
    private(set) var challenges = 0
    /// The parent's last answer to the CONNECT (0: none seen).
    private(set) var connectStatus = 0
    private(set) var ended = false
    /// The request went out: heads from now on are the destination's (but a 407 in absolute form).
    private var ready = false

    init(tunnel: Bool) { self.tunnel = tunnel }

    /// A header line now is part of the parent's answer to the CONNECT (not the destination's).
    var readsConnectAnswer: Bool { tunnel && !ready }

    /// A tunnel that was ready without a connection of its own: libcurl reused one it had open.
    private(set) var reused = false

    /// A status line with `status`. Returns true when it ends the parent's part (absolute form: the first head
    /// that is not a 407).
    mutating func statusLine(_ status: Int) -> Bool {
        guard !ended else { return false }
        if status == 407 {
            challenges += 1
            if readsConnectAnswer { connectStatus = status }
            return false
        }
        if readsConnectAnswer {
            connectStatus = status
            return false
        }
        if tunnel { return false }
        ended = true
        return true
    }

    /// The connection is ready and the request about to go out (again, after an authentication round);
    /// `opened`: whether the transfer opened a socket of its own for it (else libcurl took one from its pool).
    /// Returns true when that ends the parent's part (through a tunnel).
    mutating func connectionReady(opened: Bool) -> Bool {
        ready = true
        guard tunnel, !ended else { return false }
        ended = true
        reused = !opened
        return true
    }

    /// The transfer ended (or was given up) with the parent's part still open. Returns true if it was.
    mutating func transferEnded() -> Bool {
        guard !ended else { return false }
        ended = true
        return true
    }
}
