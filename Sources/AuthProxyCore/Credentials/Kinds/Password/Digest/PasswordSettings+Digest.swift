extension PasswordSettings {
    /// ``unanswerable(offered:overHTTPS:)`` for the own HTTP/1.1 client, which answers Digest itself
    /// (``DigestRound``): also why a Digest challenge it cannot answer went unanswered (another algorithm,
    /// `userhash`, only `auth-int` for a request with a body), unless Basic could answer instead.
    func unanswerable(challenges: [AuthChallenge], overHTTPS: Bool, hasBody: Bool) -> String? {
        if let cause = unanswerable(offered: challenges.map(\.scheme), overHTTPS: overHTTPS) { return cause }
        guard schemes.contains(.digest) else { return nil }
        if schemes.contains(.basic), overHTTPS || allowBasicOverHTTP, challenges.contains(where: { $0.is("basic") }) {
            return nil
        }
        switch DigestChallenge.pick(challenges) {
        case .none:
            return nil
        case .unusable(let why):
            return why.description
        case .usable(let c):
            do throws(DigestChallenge.Refusal) {
                _ = try c.chooseQop(hasBody: hasBody)
                return nil
            } catch {
                return error.description
            }
        }
    }
}
