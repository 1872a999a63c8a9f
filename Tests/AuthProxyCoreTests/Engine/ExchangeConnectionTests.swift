import Testing

@testable import AuthProxyCore

/// Decisions about the connection around its exchanges: a tunnel that fails to open, a reload that no longer
/// admits the client, decrypted TLS input waiting for a turn, and what a final response head asks for.
@Suite struct ExchangeConnectionTests {
    typealias M = ExchangeStateMachine
    static let limits = M.Limits(seconds: 10, idle: 60, upstream: 30)
    static let plain = ResponseFraming(noBody: false, chunked: false, contentLength: 10, keepAlive: true)

    /// A CONNECT begun and its blind tunnel started.
    static func tunnel() -> M {
        var m = M(limits: limits, now: 0)
        m.requestBegan(.init(), shuttingDown: false, now: 0)
        m.tunnelStarted()
        return m
    }

    /// A CONNECT to a matched host answered 200, its first bytes awaited.
    static func servedTunnel() -> M {
        var m = M(limits: limits, now: 0)
        m.requestBegan(.init(), shuttingDown: false, now: 0)
        _ = m.answerLocally(status: 200, close: false)
        m.servedTunnelStarted(now: 0)
        return m
    }

    // MARK: a tunnel that fails to open

    @Test func aTunnelNotYetAnsweredAnswersItsConnectWithTheError() {
        var m = Self.tunnel()
        #expect(m.tunnelFailed(answered: false) == .answer)
        #expect(m.exchange != nil)
    }

    /// The client was told 200 and speaks TLS: it is cut, and the CONNECT's exchange is back for its log line.
    @Test func aTunnelAlreadyAnswered200IsCut() {
        var m = Self.servedTunnel()
        m.tunnelAfterFirstBytes(started: 0)
        #expect(m.tunnelFailed(answered: true) == .cut)
        #expect(m.current?.status == 200)
    }

    @Test func aTunnelFailingAfterTheConnectionClosedIsCut() {
        var m = Self.tunnel()
        m.closed()
        #expect(m.tunnelFailed(answered: false) == .cut)
    }

    // MARK: a reload that no longer admits the client

    /// Closed at once unless a request is in progress (that one finishes; the next is refused).
    @Test func aNarrowingReloadClosesAllButAnExchangeInProgress() {
        let idle = M(limits: Self.limits, now: 0)
        #expect(idle.closesWhenNoLongerAdmitted)
        let tunnel = Self.tunnel()
        #expect(tunnel.closesWhenNoLongerAdmitted)
        let served = Self.servedTunnel()
        #expect(served.closesWhenNoLongerAdmitted)
        var busy = M(limits: Self.limits, now: 0)
        busy.requestBegan(.init(), shuttingDown: false, now: 0)
        #expect(!busy.closesWhenNoLongerAdmitted)
        _ = busy.answerLocally(status: 200, close: true)
        #expect(busy.endExchange(shuttingDown: false, now: 1) == .close)
        #expect(busy.closesWhenNoLongerAdmitted)
    }

    // MARK: decrypted TLS input

    @Test func decryptedInputIsPulledOnceOnTheNextTurn() {
        var m = Self.servedTunnel()
        m.tlsHandshakeStarted()
        m.handshakeFinished(now: 1)
        #expect(m.decryptedInputWaiting() == true)
        // Already scheduled: not twice.
        #expect(m.decryptedInputWaiting() == false)
        #expect(m.decryptedInputTurn() == true)
        #expect(m.decryptedInputWaiting() == true)
    }

    @Test func decryptedInputIsNotPulledOnceTheConnectionCloses() {
        var m = Self.servedTunnel()
        m.tlsHandshakeStarted()
        m.handshakeFinished(now: 1)
        #expect(m.decryptedInputWaiting() == true)
        m.closingForShutdown(now: 2)
        #expect(m.decryptedInputTurn() == false)
        #expect(m.decryptedInputWaiting() == false)
    }

    // MARK: a final response head

    /// A 414 to a long GET goes again as a form before any retry is considered; a retried status goes again as
    /// the verdict allows; nothing goes again once the request may not (here: its body is still coming, or the
    /// head went out).
    @Test(arguments: [
        (false, RetryVerdict.refused, false, M.FinalHeadStep.commit),
        (true, .refused, false, .resendAsForm(serial: 1)),
        (false, .retry(after: 7), false, .retry(serial: 1, after: 7)),
        (false, .budgetExhausted, false, .commit),
        (true, .retry(after: 7), false, .resendAsForm(serial: 1)),
        (true, .refused, true, .commit),
        (false, .retry(after: 7), true, .commit),
    ])
    func aFinalHeadIsCommittedOrSentAgain(
        asForm: Bool, verdict: RetryVerdict, bodyComing: Bool, expected: M.FinalHeadStep
    ) {
        var m = M(limits: Self.limits, now: 0)
        m.requestBegan(.init(hasBody: bodyComing), shuttingDown: false, now: 0)
        m.transferStarted(inspect: false, now: 0)
        #expect(m.considersRetry(.status503, asForm: asForm) == (!asForm && !bodyComing))
        let step = m.finalHead(asForm: asForm, verdict: verdict)
        #expect(step == expected)
        // A resend as a form is not a retry; a retry is counted.
        if case .retry = step { #expect(m.upstreamRetries == 1) } else { #expect(m.upstreamRetries == 0) }
        if step != .commit { #expect(m.awaitsRetry(serial: 1)) }
    }

    @Test func aHeadAfterBodyBytesWentOutIsCommitted() {
        var m = M(limits: Self.limits, now: 0)
        m.requestBegan(.init(), shuttingDown: false, now: 0)
        m.transferStarted(inspect: false, now: 0)
        _ = m.responseHeadCommitted(status: 200, framing: Self.plain, inspection: .none)
        _ = m.upstreamBody(count: 4, clientPending: 0, clientFailed: false, now: 1)
        #expect(!m.considersRetry(.status502))
        #expect(m.finalHead(asForm: true, verdict: .retry(after: 0)) == .commit)
    }

    // MARK: a served tunnel's first bytes

    /// The first bytes decide the mode: plain HTTP is parsed as requests, TLS is intercepted (the header timeout
    /// still counted from the CONNECT's answer), anything refused is answered; before they arrive nothing is read.
    @Test func aServedTunnelsFirstBytesDecideItsMode() {
        var m = Self.servedTunnel()
        #expect(m.state == .awaitingTunnelContent(since: 0))
        #expect(m.nextInputStep(buffered: 0, now: 1) == .wait)
        #expect(m.nextInputStep(buffered: 3, now: 1) == .classifyTunnel)
        var http = m
        http.tunnelCarriesHTTP(now: 2)
        #expect(http.nextInputStep(buffered: 3, now: 2) == .parseHead)
        var tls = m
        tls.tlsHandshakeStarted()
        #expect(tls.state == .tlsHandshake(since: 0))
        // Handshake bytes are the TLS session's, not requests.
        #expect(tls.nextInputStep(buffered: 3, now: 2) == .wait)
        #expect(tls.tick(now: 11_000_000_000, clientPending: 0, lastSendProgress: 0) == .close)
        // Only from the served tunnel's first bytes.
        var plain = M(limits: Self.limits, now: 0)
        plain.tunnelCarriesHTTP(now: 1)
        plain.tlsHandshakeStarted()
        #expect(plain.state == .awaitingHead(headStarted: nil))
    }

    // MARK: the read loop

    /// Between requests a pass stops at a short read; while a body streams it reads to `EAGAIN` (a hang-up behind
    /// the body may not be reported again); while closing, input is read and dropped.
    @Test func eachPassOfTheReadLoopReadsAsTheStateSays() {
        var m = M(limits: Self.limits, now: 0)
        #expect(m.readPass == .untilShortRead)
        m.requestBegan(.init(hasBody: true), shuttingDown: false, now: 0)
        #expect(m.readPass == .toTheEnd)
        _ = m.requestBodyMoved(complete: true, pending: 0, now: 1)
        #expect(m.readPass == .untilShortRead)
        _ = m.answerLocally(status: 200, close: true)
        #expect(m.endExchange(shuttingDown: false, now: 1) == .close)
        #expect(m.readPass == .discard)
    }

    /// After a pass that stopped early: read on from the input limit or when a body now streams, unless reading is
    /// paused (input at its limit) or left (the client half-closed, a tunnel owns the socket).
    @Test(arguments: [
        (false, false, 0, false),  // a short read, no body: wait for the next event
        (true, false, 0, true),  // the input limit was reached and the machine has since consumed some
        (true, false, 100, false),  // still at the limit: reading is paused
        (false, true, 0, true),  // the head just parsed has a body: read it on now
        (false, true, 100, false),
    ])
    func thePassReadsOnWhenTheMachineSays(atLimit: Bool, bodyStreams: Bool, buffered: Int, expected: Bool) {
        var m = M(limits: Self.limits, now: 0)
        if bodyStreams { m.requestBegan(.init(hasBody: true), shuttingDown: false, now: 0) }
        #expect(m.readsOn(atLimit: atLimit, buffered: buffered, limit: 100) == expected)
    }

    @Test func aHalfClosedClientIsNotReadOn() {
        var m = M(limits: Self.limits, now: 0)
        m.requestBegan(.init(), shuttingDown: false, now: 0)
        #expect(m.clientEOF(pendingOutput: 0) == .halfClosed)
        #expect(!m.readsOn(atLimit: true, buffered: 0, limit: 100))
    }
}
