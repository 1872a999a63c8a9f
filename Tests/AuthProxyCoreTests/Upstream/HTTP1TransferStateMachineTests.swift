import Testing

@testable import AuthProxyCore

/// An exchange on a kept-alive connection from the pool, its head written (and its body, when `sent`).
private func onPooledConnection(body: Bool, sent: Bool = true) -> HTTP1TransferStateMachine {
    var m = HTTP1TransferStateMachine(hasBody: body)
    let r1 = m.start(pooledConnection: true)
    #expect(r1 == .sendHead)
    m.sendingHead()
    let flows = m.headWritten()
    #expect(flows == body)
    if body, sent { m.bodyEnded() }
    return m
}

@Suite struct HTTP1TransferStateMachineTests {
    @Test func aNewConnectionThenTheHeadThenTheAnswer() {
        var m = HTTP1TransferStateMachine(hasBody: false)
        let r2 = m.start(pooledConnection: false)
        #expect(r2 == .connect)
        #expect(m.phase == .connecting)
        #expect(!m.readsResponse)
        m.connected()
        #expect(m.phase == .exchanging)
        m.sendingHead()
        #expect(m.request == .sent)
        let r3 = m.headWritten()
        #expect(!r3, "no body to send")
        #expect(m.readsResponse)
        let r4 = m.responseComplete(reusable: true)
        #expect(r4, "back to the pool")
        #expect(m.isEnded)
        let r5 = m.end()
        #expect(!r5, "it ends once")
    }

    @Test func theBodyFlowsAfterTheHeadAndPausesUntilResumed() {
        var m = HTTP1TransferStateMachine(hasBody: true)
        _ = m.start(pooledConnection: false)
        m.connected()
        m.sendingHead()
        let r6 = m.headWritten()
        #expect(r6)
        #expect(m.bodyFlows)
        m.bodyPaused()
        #expect(!m.bodyFlows)
        let r7 = m.resume()
        #expect(r7 == .init(response: false, body: true))
        #expect(m.bodyFlows)
        m.bodyEnded()
        #expect(!m.bodyFlows)
        #expect(m.request == .sent)
        let r8 = m.resume()
        #expect(r8 == .init(), "nothing was paused")
    }

    @Test func theResponsePausesUntilResumed() {
        var m = onPooledConnection(body: false)
        m.responseWasPaused()
        #expect(!m.readsResponse)
        let r9 = m.resume()
        #expect(r9 == .init(response: true, body: false))
        #expect(m.readsResponse)
    }

    @Test func nothingResumesAfterTheEnd() {
        var m = onPooledConnection(body: true, sent: false)
        m.bodyPaused()
        m.responseWasPaused()
        let r10 = m.end()
        #expect(r10)
        let r11 = m.resume()
        #expect(r11 == .init())
        #expect(!m.bodyFlows && !m.readsResponse)
    }

    /// An answer before the upload ended (a 413): the rest of the body is not sent, and the connection, in the
    /// middle of the request, is not pooled.
    @Test func anAnswerBeforeTheUploadEndedKeepsTheConnectionOutOfThePool() {
        var m = onPooledConnection(body: true, sent: false)
        #expect(m.bodyFlows)
        let r12 = m.responseComplete(reusable: true)
        #expect(!r12)
        #expect(m.request == .cutShort)
        #expect(!m.bodyFlows)
    }

    /// A write that fails: the request did not all reach the server, so any method goes again on a pooled
    /// connection, its body rewound; on a new connection the answer is read (the upstream may have answered first).
    @Test func aFailedWrite() {
        var pooled = onPooledConnection(body: true, sent: false)
        let r13 = pooled.writeFailed(responseStarted: false)
        #expect(r13 == .resend(rewindBody: true))
        pooled.resending()
        #expect(pooled.phase == .connecting)
        #expect(pooled.request == .unsent)

        var fresh = HTTP1TransferStateMachine(hasBody: true)
        _ = fresh.start(pooledConnection: false)
        fresh.connected()
        fresh.sendingHead()
        _ = fresh.headWritten()
        let r14 = fresh.writeFailed(responseStarted: false)
        #expect(r14 == .readAnswer)
        #expect(fresh.request == .cutShort)
        #expect(!fresh.bodyFlows)
        let r15 = fresh.responseComplete(reusable: true)
        #expect(!r15)
    }

    @Test func aBodyThatCannotBeRewoundIsNotSentAgain() {
        var m = onPooledConnection(body: true, sent: false)
        let r16 = m.writeFailed(responseStarted: false)
        #expect(r16 == .resend(rewindBody: true))
        let r17 = m.bodyNotRewound(afterWriteFailure: true)
        #expect(r17 == .readAnswer)
        #expect(m.request == .cutShort)

        var ended = onPooledConnection(body: true, sent: false)
        let r18 = ended.inputEnded(responseStarted: false, writesPending: false, resendable: false)
        #expect(r18 == .resend(rewindBody: true))
        let r19 = ended.bodyNotRewound(afterWriteFailure: false)
        #expect(r19 == .endResponse)
    }

    /// ``ResendPolicy`` on a kept-alive connection that died before any byte of the answer.
    @Test(arguments: [
        // body, all of it sent, bytes still queued, resendable, answer started → decision
        (false, true, false, true, false, HTTP1TransferStateMachine.Loss.resend(rewindBody: false)),
        (false, true, false, false, false, .refuseResend),  // a POST without a body, all sent
        (true, true, false, false, false, .refuseResend),  // a POST with its body, all sent
        (true, true, true, false, false, .resend(rewindBody: true)),  // some bytes still queued
        (true, false, false, false, false, .resend(rewindBody: true)),  // the body unfinished
        (true, true, false, true, false, .resend(rewindBody: true)),  // a PUT, all sent
        (false, true, false, true, true, .endResponse),  // the answer had started: the reader decides
        (false, true, false, false, true, .endResponse),
    ])
    func theInputOfAPooledConnectionEnded(
        body: Bool, sent: Bool, pending: Bool, resendable: Bool, started: Bool,
        expected: HTTP1TransferStateMachine.Loss
    ) {
        var m = onPooledConnection(body: body, sent: sent)
        let r20 = m.inputEnded(responseStarted: started, writesPending: pending, resendable: resendable)
        #expect(r20 == expected)
    }

    @Test func resendableIsAskedOnlyWhenItDecides() {
        var fresh = HTTP1TransferStateMachine(hasBody: false)
        _ = fresh.start(pooledConnection: false)
        fresh.connected()
        fresh.sendingHead()
        var asked = false
        let loss = fresh.inputEnded(
            responseStarted: false, writesPending: false,
            resendable: {
                asked = true
                return true
            }())
        #expect(loss == .endResponse, "a new connection's end is the reader's to judge")
        #expect(!asked)
    }

    /// One resend: the new connection is not from the pool, and its loss is the reader's to judge.
    @Test func theRequestGoesAgainOnce() {
        var m = onPooledConnection(body: false)
        let r21 = m.inputEnded(responseStarted: false, writesPending: false, resendable: true)
        #expect(r21 == .resend(rewindBody: false))
        m.resending()
        m.connected()
        m.sendingHead()
        let r22 = m.inputEnded(responseStarted: false, writesPending: false, resendable: true)
        #expect(r22 == .endResponse)
        let r23 = m.writeFailed(responseStarted: false)
        #expect(r23 == .readAnswer)
    }

    /// A resend that is cancelled while the body is rewound does not start again.
    @Test func aCancelledExchangeIsNotResent() {
        var m = onPooledConnection(body: true, sent: false)
        let r24 = m.writeFailed(responseStarted: false)
        #expect(r24 == .resend(rewindBody: true))
        let r25 = m.end()
        #expect(r25)
        m.resending()
        #expect(m.isEnded)
        m.connected()
        #expect(m.isEnded)
    }

    /// A write that failed at once while the head went out moved the exchange to a new connection: the body does
    /// not flow on the old one.
    @Test func noBodyAfterAHeadWhoseWriteMovedTheExchange() {
        var m = HTTP1TransferStateMachine(hasBody: true)
        _ = m.start(pooledConnection: true)
        m.sendingHead()
        let r26 = m.writeFailed(responseStarted: false)
        #expect(r26 == .resend(rewindBody: false), "no body asked for yet")
        m.resending()
        let r27 = m.headWritten()
        #expect(!r27)
    }

    @Test func aChallengeIsAnsweredOnTheSameConnectionWhenTheRequestWentOutWhole() {
        var m = HTTP1TransferStateMachine(hasBody: true)
        _ = m.start(pooledConnection: true)
        m.sendingHead()
        _ = m.headWritten()
        m.bodyEnded()
        let same = m.answeringChallenge(reuseConnection: true)
        #expect(same && m.phase == .exchanging && m.request == .unsent)
        m.sendingHead()
        #expect(m.bodyFlows, "the body goes again")
        _ = m.headWritten()
        // A server may close the connection right after its 401 without saying so: the answer dies before any byte
        // of the response, and goes again on a new connection, once.
        m.bodyEnded()
        let loss = m.inputEnded(responseStarted: false, writesPending: false, resendable: true)
        #expect(loss == .resend(rewindBody: true))
    }

    @Test func aChallengeAnsweredBeforeTheBodyWentOutTakesANewConnection() {
        var m = HTTP1TransferStateMachine(hasBody: true)
        _ = m.start(pooledConnection: false)
        m.connected()
        m.sendingHead()
        _ = m.headWritten()
        let same = m.answeringChallenge(reuseConnection: true)
        #expect(!same && m.phase == .connecting && !m.bodyFlows)
        m.connected()
        m.sendingHead()
        let flows = m.headWritten()
        #expect(flows)
        let closed = m.answeringChallenge(reuseConnection: false)
        #expect(!closed && m.phase == .connecting)
        _ = m.end()
        let after = m.answeringChallenge(reuseConnection: true)
        #expect(!after && m.isEnded)
    }
}
