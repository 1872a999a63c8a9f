import Testing

@testable import AuthProxyCore

private let parent = ParentProxy(scheme: .http, host: "squid", port: 3128)

private func failure(_ cause: ParentFailover.Cause, connectStatus: Int = 0) -> ParentFailure {
    ParentFailure(parent: parent, cause: cause, connectStatus: connectStatus, credential: "corp")
}

@Suite struct ParentFailoverStepTests {
    /// Every cause × whether anything reached the client × parents left × a trailing DIRECT.
    @Test(arguments: ParentFailover.Cause.allCases, [false, true])
    func theDecision(cause: ParentFailover.Cause, reachedClient: Bool) {
        let f = failure(cause)
        for parentsLeft in [0, 1, 2] {
            for fallbackDirect in [false, true] {
                let step = ParentFailoverStep.after(
                    f, reachedClient: reachedClient, parentsLeft: parentsLeft, fallbackDirect: fallbackDirect)
                let expected: ParentFailoverStep
                if cause == .refused || reachedClient {
                    expected = .giveUp(f)
                } else if parentsLeft > 0 {
                    expected = .nextParent
                } else {
                    expected = fallbackDirect ? .direct : .giveUp(f)
                }
                #expect(
                    step == expected, "\(cause) reached=\(reachedClient) left=\(parentsLeft) direct=\(fallbackDirect)")
            }
        }
    }

    @Test func aRefusedConnectIsAboutTheDestinationAndMovesNowhere() {
        let f = failure(.refused, connectStatus: 403)
        #expect(ParentFailoverStep.after(f, reachedClient: false, parentsLeft: 3, fallbackDirect: true) == .giveUp(f))
        #expect(f.status == 403)
        #expect(f.response(destination: "h:443", timeoutSeconds: 30).status == 403)
    }

    @Test func theLastParentTimingOutGivesUpWithTheParentsError() {
        let f = failure(.timeout)
        guard
            case .giveUp(let given) = ParentFailoverStep.after(
                f, reachedClient: false, parentsLeft: 0, fallbackDirect: false)
        else {
            Issue.record("expected to give up")
            return
        }
        #expect(given.cause == .timeout)
        #expect(given.response(destination: "h:80", timeoutSeconds: 30).status == 504)
    }

    /// A refused login is a 407 however libcurl read it (a relayed request's 407 is no CONNECT status).
    @Test func aRefusedLoginIsA407() {
        #expect(failure(.auth, connectStatus: 0).status == 407)
        #expect(failure(.auth, connectStatus: 502).status == 407)
        #expect(failure(.refused, connectStatus: 502).status == 502)
        #expect(failure(.connect).status == 0)
    }
}
