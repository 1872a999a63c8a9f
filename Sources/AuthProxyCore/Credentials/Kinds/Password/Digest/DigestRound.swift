/// Whether a 401 is answered with Digest by the proxy's own client (``HTTP1Transfer``), as a value: one answer per
/// request, and a second only when the server says the nonce was stale (`stale=true`: the login was right). A
/// refused answer goes to the client, where the proxy's warning names the credential.
struct DigestRound: Equatable {
    /// Answers sent to a challenge of this request (a preemptive one from the session cache does not count).
    private(set) var answers = 0
    /// The request carries a Digest login (preemptive, or an answer).
    private(set) var sentLogin = false

    enum Decision: Equatable {
        /// Not a Digest challenge this round answers: the response goes to the client as it is.
        case relay
        /// Answer on the same connection (when kept alive) or a new one, the body sent again.
        case answer(DigestChallenge, DigestQop)
        /// Digest is offered and cannot be answered: the 401 goes to the client, and the log says why.
        case refuse(DigestChallenge.Refusal)
    }

    /// The request goes out with a login from the session cache.
    mutating func sendingPreemptive() {
        sentLogin = true
    }

    mutating func decide(status: Int, challenges: [AuthChallenge], hasBody: Bool) -> Decision {
        guard status == 401 else { return .relay }
        switch DigestChallenge.pick(challenges) {
        case .none:
            return .relay
        case .unusable(let why):
            return .refuse(why)
        case .usable(let c):
            guard answers == 0 || (answers == 1 && c.stale) else { return .relay }
            let qop: DigestQop
            do throws(DigestChallenge.Refusal) {
                qop = try c.chooseQop(hasBody: hasBody)
            } catch {
                return .refuse(error)
            }
            answers += 1
            sentLogin = true
            return .answer(c, qop)
        }
    }
}
