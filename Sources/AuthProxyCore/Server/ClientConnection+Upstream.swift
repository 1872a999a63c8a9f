import CAuthProxyShims
import CCurl
import Dispatch
import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// The libcurl side of a forwarded request: starting the transfer, feeding it the request body, and
/// relaying the response head and body (the `UpstreamExchangeDelegate` callbacks).
extension ClientConnection {
    /// Starts the transfer for the current request to `url` with the client's `headers`: the attempt is decided
    /// (``ForwardAttempt``: the body, GET→POST; the client is the plan's), the credentials apply to the request as it goes
    /// (``applyCredentials(_:to:)``), and it passes ``OutboundHead``'s check.
    func startTransfer(url: URLTarget, headers: HTTPHeaders) {
        guard !machine.isClosed, let x = ex, let h = x.head else { return }
        var attempt = ForwardAttempt(
            url: url, headers: headers, method: h.method, framing: h.framing, upgrade: h.upgrade,
            heldForm: x.formBody?.count, client: x.client, retries: context.retryPolicy.isEnabled,
            getAsPostLimit: context.config.getAsPostAboveBytes,
            getAsPost: x.attempt?.getAsPost)
        // The plan says when the request needs upstream connections of this connection's own (a client doing
        // NTLM/Negotiate itself): made on the first such request, closed with this connection.
        if ownUpstreams == nil, x.plan?.ownConnections == true {
            ownUpstreams = OwnUpstreams(loop: loop)
        }
        // (A form made from a long GET by an earlier attempt is made again below, from the GET.)
        let held = attempt.getAsPost == nil ? x.formBody : nil
        var applied = OutgoingRequest(
            method: h.method, target: url, fields: headers, body: held, bodyLength: attempt.bodyLength,
            isUpgrade: attempt.isUpgrade, now: 0, credential: "")
        if let failure = applyCredentials(x, to: &applied) {
            refuseApplication(failure)
            return
        }
        // A long GET goes as a form (its length with the credential's additions); the credentials apply again to
        // the form, which is what goes upstream.
        let form = attempt.form(
            applied: applied.target, limit: context.config.getAsPostAboveBytes, matched: x.credential != nil)
        let isUpgrade = attempt.isUpgrade, asForm = attempt.getAsPost != nil, edits = attempt.edits
        let client = attempt.client
        // Moved, not copied: the attempt holds the URL and the client's fields.
        x.attempt = consume attempt
        if form != .asSent {
            if form == .newlyByLength { ProxyMetrics.active?.getAsPost(.length) }
            let form = GetAsPost.form(of: url)
            applied = OutgoingRequest(
                method: "POST", target: form.target, fields: headers, body: form.body,
                bodyLength: Int64(form.body.count), isUpgrade: isUpgrade, now: 0, credential: "")
            applied.fields.setInjected(name: "Content-Type", value: GetAsPost.contentType)
            if let failure = applyCredentials(x, to: &applied) {
                refuseApplication(failure)
                return
            }
        }
        if let body = applied.body {
            x.formBody = body
            x.formOffset = 0
        }
        if let trace = x.trace {
            trace.beginAttempt(
                method: applied.method, url: applied.target, client: client, retryCause: x.retryCause?.rawValue,
                route: x.parentRoute, fields: &applied.fields)
        }
        let method = applied.method, sent = applied.target, fields = applied.fields
        if let problem = OutboundHead.problem(method: method, target: sent.pathAndQuery, fields: fields) {
            refuseOutboundHead(problem, url: url)
            return
        }
        if CaptureRecorder.shared.isActive || x.capture != nil {
            captureAttempt(x, head: h, url: url, clientForm: held, sent: applied)
        }
        let inspect = x.credential?.kind.inspectsResponses == true
        var request = UpstreamRequest(
            method: method, url: sent.url, fields: fields, bodyLength: applied.bodyLength,
            timeoutSeconds: context.config.upstreamTimeoutSeconds)
        // A read sent as a form is as harmless to repeat as the GET it stands for; an edit is never repeated,
        // whatever method carries it (``ArcGISOperation``).
        request.harmlessToRepeat = asForm
        request.edits = edits
        request.via = context.viaValue
        request.network = x.networkAuth
        request.denyDestinations = context.access.denyDestinations
        request.upgrade = h.upgrade
        request.parentRoute = x.parentRoute
        request.trace = x.trace?.attempt
        x.responseHead.reset()
        let started = now
        x.upstreamStarted = started
        countInRetryBudget(url: url, now: started)
        x.inspectsService = inspect
        machine.transferStarted(
            inspect: inspect || (x.gatewayToken != nil && x.gatewayCredential?.kind.inspectsResponses == true),
            now: started)
        switch client {
        case .own:
            let t = HTTP1Transfer(
                pool: loop.http1, request: request, target: sent,
                affinity: ownUpstreams.map { .ownedBy($0.owner) } ?? .shared, delegate: self)
            x.transfer = t
            t.start()
        case .libcurl:
            let t = CurlTransfer(
                multi: ownUpstreams?.multi ?? loop.multi, request: request,
                destination: "\(url.urlHost):\(url.port)", delegate: self)
            x.transfer = t
            t.start()
        }
        pumpBody()
    }

    /// Applies the service credential's kind, then the gateway's, to the request as it goes upstream, with the tokens
    /// obtained for them (``CredentialKind/apply(_:to:)``). Returns the client's answer when one cannot apply.
    private func applyCredentials(_ x: ExchangeContext, to r: inout OutgoingRequest) -> ApplyFailure? {
        if !x.printSecrets.isEmpty { applyPrintJob(x, to: &r) }
        guard x.credential != nil || x.gatewayCredential != nil else { return nil }
        r.now = nowMillis()
        if let c = x.credential {
            r.credential = c.name
            r.placement = c.placement
            r.layer = .service
            if let failure = c.kind.apply(x.injectedToken, to: &r) { return failure }
            // Answers read for a rejection in their body come back in a coding the reader decodes (not br or zstd).
            if c.retriesRejections, c.kind.readsBodiesForRejection,
                let ae = TokenRejection.acceptEncodingForInspection(r.fields)
            {
                r.fields.setInjected(name: "Accept-Encoding", value: ae)
            }
        }
        // After the service's: a gateway's static fields win a name both set (the gateway is met first).
        if let g = x.gatewayCredential {
            r.credential = g.name
            r.placement = g.placement
            r.layer = .gateway
            if let failure = g.kind.apply(x.gatewayToken, to: &r) { return failure }
        }
        // A body searched for secrets comes uncompressed (one that comes compressed anyway is decoded: BodyScrub).
        x.scrubsBodies =
            x.credential?.scrubsResponseBodies == true || x.gatewayCredential?.scrubsResponseBodies == true
            || !x.printSecrets.isEmpty
        if x.scrubsBodies { r.fields.setInjected(name: "Accept-Encoding", value: "identity") }
        return nil
    }

    /// A credential could not apply to the request: nothing goes upstream, the client gets the kind's answer.
    private func refuseApplication(_ failure: ApplyFailure) {
        run(
            machine.tokenUnusable(),
            answer: ErrorResponse(status: failure.status, message: failure.message, details: failure.details))
    }

    /// The head made for `url` breaks ``OutboundHead``: nothing goes upstream, the client gets a 502 that names the
    /// field and the credential that set it, never the value.
    private func refuseOutboundHead(_ problem: OutboundHead.Problem, url: URLTarget) {
        let credential = ex?.credential?.name ?? ex?.gatewayCredential?.name
        var metadata: Logger.Metadata = [
            "client": "\(peer)", "url": "\(url.origin)\(url.path)", "problem": "\(problem.message)",
        ]
        if let credential { metadata["credential"] = "\(credential)" }
        logger.error("refused to send a request head the upstream could read differently", metadata: metadata)
        let whose = credential.map { " (credential '\($0)')" } ?? ""
        run(
            machine.outboundHeadRefused(),
            answer: ErrorResponse(
                status: 502,
                message: "The proxy did not send the request to \(url.origin)\(whose): \(problem.message)",
                details: [
                    "A token, key or header value the proxy adds holds a byte a request head cannot carry (a line "
                        + "break, a control byte); sent, it could split the request in two. Check the token service "
                        + "or the credential's configuration."
                ]))
    }

    /// Moves request-body bytes from the input buffer to the body buffer libcurl reads from (or into the form
    /// being collected).
    func pumpBody() {
        guard let e = machine.exchange, !e.request.isComplete, let x = ex else { return }
        if e.request.isCollectingForm {
            let n = Int(min(x.bodyRemaining, Int64(inbuf.count)))
            inbuf.withUnreadBytes { x.formBody!.append(contentsOf: UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            inbuf.consume(n)
            x.bodyRemaining -= Int64(n)
            if x.bodyRemaining == 0 {
                machine.formCollected()
                formCollected()
            }
            return
        }
        var complete = false
        while x.bodyBuffer.count < Self.maxBuffered, !inbuf.isEmpty, !complete {
            let space = Self.maxBuffered - x.bodyBuffer.count
            if var decoder = x.chunkDecoder {
                // Move the buffer out while the closure appends to it, so appending does not copy it.
                var out = ByteBuffer()
                swap(&out, &x.bodyBuffer)
                let result: Result<Int, HTTPParseError> = inbuf.withUnreadBytes { bytes in
                    do throws(HTTPParseError) {
                        return .success(try decoder.decode(bytes, limit: space) { out.append($0) })
                    } catch {
                        return .failure(error)
                    }
                }
                swap(&out, &x.bodyBuffer)
                let consumed: Int
                switch result {
                case .success(let n): consumed = n
                case .failure(let error):
                    x.chunkDecoder = nil
                    bodyFailed(error)
                    return
                }
                inbuf.consume(consumed)
                x.chunkDecoder = decoder
                if decoder.isDone { complete = true }
            } else {
                let n = Int(min(x.bodyRemaining, Int64(min(inbuf.count, space))))
                inbuf.withUnreadBytes { x.bodyBuffer.append(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
                inbuf.consume(n)
                x.bodyRemaining -= Int64(n)
                if x.bodyRemaining == 0 { complete = true }
            }
        }
        if machine.requestBodyMoved(complete: complete, pending: x.bodyBuffer.count, now: now) {
            x.transfer?.resume()
        }
    }

    /// The request body is malformed: the machine says whether the client gets a 400 or, its answer begun, a cut.
    func bodyFailed(_ e: HTTPParseError) {
        cancelTransfer()
        run(machine.requestBodyInvalid(), answer: ErrorResponse.forParseError(e))
    }

    func transferNeedsBody(_ buffer: UnsafeMutableRawBufferPointer) -> BodySupply {
        if machine.upstreamWantsBody(now: now) { send("HTTP/1.1 100 Continue\r\n\r\n") }
        // The 100 Continue may have failed and closed the connection (which drops the context).
        guard let x = ex else { return .abort }
        if let form = x.formBody {
            let off = x.formOffset
            let n = min(buffer.count, form.count - off)
            if n == 0 { return .end }
            form.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[off..<(off + n)])) }
            x.formOffset += n
            if machine.attempt == 1, x.attempt?.getAsPost == nil { x.bodyBytesIn += Int64(n) }
            return .bytes(n)
        }
        if let r = x.replay, x.replayOffset < r.count {
            // A retry: first the bytes the rejected attempt already sent.
            let n = r.read(at: x.replayOffset, into: buffer)
            if n <= 0 { return .abort }
            x.replayOffset += Int64(n)
            return .bytes(n)
        }
        if x.bodyBuffer.isEmpty {
            switch machine.requestBodyBufferEmpty() {
            case .end: return .end
            case .pause: return .pause
            }
        }
        let n = min(buffer.count, x.bodyBuffer.count)
        x.bodyBuffer.withUnreadBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        x.bodyBuffer.consume(n)
        x.bodyBytesIn += Int64(n)
        if let r = x.replay {
            r.append(UnsafeRawBufferPointer(buffer.baseAddress.map { UnsafeRawBufferPointer(start: $0, count: n) }!))
            x.replayOffset = r.count
        }
        if !bodyComplete, !inbuf.isEmpty {
            pumpBody()
        }
        updateReadInterest()
        return .bytes(n)
    }

    func transferRewindBody() -> Bool {
        guard let x = ex else { return false }
        if x.formBody != nil {
            x.formOffset = 0
            return true
        }
        guard let r = x.replay, !r.overflowed else { return x.bodyBytesIn == 0 && x.bodyBuffer.isEmpty }
        x.replayOffset = 0
        return true
    }

    func transferDidReceiveHeaderLine(_ raw: UnsafeRawBufferPointer) {
        // Trailers of a chunked response (hop-by-hop) are dropped.
        guard machine.readsResponseHead, let x = ex else { return }
        x.capture?.headerLine(raw)
        switch x.responseHead.add(line: raw) {
        case .status:
            // Progress is stamped once per head (its first and last line), not per field: reading the clock
            // shows in profiles, and a head arrives within one read anyway.
            machine.upstreamProgress(now: now)
        case .end:
            machine.upstreamProgress(now: now)
            if ProxyMetrics.active != nil { noteChallengeScheme(x) }
            // The argument first: evaluated between reading the head and calling it, it would make the compiler
            // copy the head assembler (the call could change the exchange) for every response.
            // The own client answers a Digest 401 itself and hands on only the final head.
            let answersChallenges = x.client == .libcurl && x.networkAuth.answersChallenges
            if x.responseHead.isFinal(answersChallenges: answersChallenges) {
                let asForm = sendsAsFormAfter414(x)
                let cause = statusRetryCause(x)
                var verdict = RetryVerdict.refused
                if let cause, machine.considersRetry(cause, asForm: asForm) {
                    verdict = statusRetryVerdict(x, cause: cause)
                }
                switch machine.finalHead(asForm: asForm, verdict: verdict) {
                case .resendAsForm(let serial):
                    resendAsForm(x, serial: serial)
                    return
                case .retry(let serial, let wait):
                    if let cause { scheduleRetry(x, serial: serial, after: wait, cause: cause, detail: nil) }
                    return
                case .commit:
                    break
                }
                commitResponseHead(inspect: true)
            }
        case .field, .ignored:
            break
        }
    }

    /// Writes the client's response head from the upstream's (framing, hop-by-hop fields, Via, CORS) and holds it
    /// to go out with the first body bytes; then lets the machine decide whether to inspect the response.
    /// Returns false when the head is refused (``ResponseHeadAssembler/violation``): the client has its 502.
    @discardableResult
    func commitResponseHead(inspect: Bool) -> Bool {
        guard let x = ex else { return false }
        if let violation = x.responseHead.violation {
            refuseResponseHead(violation)
            return false
        }
        let relayed = ExchangeStateMachine.relayedStatus(
            upstream: x.responseHead.status, headComplete: x.responseHead.isComplete)
        if relayed != x.responseHead.status { x.responseHead.substituteStatus(relayed) }
        x.heldHead.removeAll()
        // What the credentials put on the request never goes back to the client: masked in every field, and in the
        // body when the credential scrubs bodies or the response is a redirect, whose body repeats its URL
        // ("Object moved ... <a href=...>").
        x.bodyScrub = nil
        let relayedStatus = x.responseHead.status
        if !x.stacksGateway, !x.scrubsBodies, relayedStatus < 300 || relayedStatus >= 400, let t = x.injectedToken,
            x.credential?.kind.secretIsItsToken == true, case .none = x.plan?.network.password
        {
            // The usual case (one token, nothing to scrub in the body): no list of secrets made per response.
            maskInjectedToken(in: x, token: t.value)
        } else if case let secrets = responseSecrets(x), !secrets.isEmpty {
            for secret in secrets { maskInjectedToken(in: x, token: secret) }
            let s = x.responseHead.status
            if x.scrubsBodies || (s >= 300 && s < 400), !planBodyScrub(x, secrets: secrets) { return false }
        }
        if x.upgradedToHTTPS, let client = x.originalURL, let upstream = x.upstreamURL {
            // upgrade_to_https: a redirect to the https origin goes back to the client as the http one it used.
            let store = credentials
            x.responseHead.rewriteLocations { v in
                UpgradedRedirect.rewrite(v, upstream: upstream, client: client) { store.upgradesToHTTPS($0) }
            }
        }
        // The options first, for the same reason as in ``transferDidReceiveHeaderLine(_:)``: no copy of the head.
        let options = ResponseHeadAssembler.Options(
            isHeadRequest: x.head?.isHead ?? false,
            clientMinorVersion: x.head?.minorVersion ?? 1, keepAlive: machine.keepAlive, corsOrigin: x.corsOrigin,
            varyOrigin: x.varyOrigin, varyAuthorization: x.varyAuthorization, via: context.viaValue)
        let framing = x.responseHead.write(into: &x.heldHead, options: options)
        let status = x.responseHead.status
        if let m = ProxyMetrics.active {
            m.durationFirstByte.recordNanoseconds(Int64(bitPattern: now &- x.upstreamStarted))
            if let scheme = x.challengeScheme {
                m.networkAuth(
                    credential: x.networkAuth.passwordName ?? context.kerberosCredentialName ?? "-", scheme: scheme,
                    success: status != 401)
            }
        }
        let (inspection, rejectedLayer) = TokenLayers.inspection(
            inspect: inspect,
            gatewayRejects: inspect && x.gatewayToken != nil
                && x.gatewayCredential.map { $0.kind.rejection(of: responseView(x, $0)) == .rejected } == true,
            inspectsService: x.inspectsService
        ) {
            guard let c = x.credential else { return .none }
            switch c.kind.rejection(of: responseView(x, c)) {
            case .none: return .none
            case .rejected: return .rejectedByStatus
            case .readBody:
                return ExchangeStateMachine.inspection(status: status, framing: framing, mayCarryError: true)
            }
        }
        if machine.responseHeadCommitted(status: status, framing: framing, inspection: inspection) == .rejected {
            tokenRejected(layer: rejectedLayer)
        }
        return true
    }

    /// The scheme a 401 offered that the proxy's login answers, for the metrics; counted for a final 401 too (a
    /// Basic-only password's answers no challenge). Kept out of ``transferDidReceiveHeaderLine(_:)``, which runs
    /// for every head line: inlined there, it made the compiler copy the head assembler for each response.
    @inline(never)
    private func noteChallengeScheme(_ x: ExchangeContext) {
        // The own client answers a Digest 401 without handing it on: it names the scheme it logged in with.
        if x.challengeScheme == nil, let answered = x.transfer?.answeredChallenge { x.challengeScheme = answered }
        guard x.challengeScheme == nil, x.responseHead.status == 401, x.networkAuth.logsIn else { return }
        x.challengeScheme = NetworkAuthScheme.answered(
            offered: x.responseHead.values(of: "www-authenticate"), auth: x.networkAuth)
    }

    /// The values masked in this exchange's response: the applied credentials' secrets (the service layer's and
    /// the gateway layer's).
    func responseSecrets(_ x: ExchangeContext) -> [String] {
        // No intermediate arrays: this runs for every response to a request with a credential.
        var secrets: [String] = []
        if let c = x.credential, x.injectedToken != nil || c.kind.tokenSource == .none {
            secrets = c.kind.secrets(token: x.injectedToken)
        }
        if x.stacksGateway, let g = x.gatewayCredential, x.gatewayToken != nil || g.kind.tokenSource == .none {
            secrets += g.kind.secrets(token: x.gatewayToken)
        }
        if !x.printSecrets.isEmpty { secrets += x.printSecrets }
        // The Basic login the proxy sent (``HTTP1Transfer``, or libcurl): an answer echoing it is masked like a
        // token. Read through the plan in place, not through a copy of its network settings.
        if let url = x.plan?.upstreamURL,
            let basic = x.plan?.network.password?.sentBasicCredentials(overHTTPS: url.scheme == "https")
        {
            secrets.append(basic)
        }
        return secrets
    }

    /// Decides how the response body is scrubbed (``BodyScrub``): for a body that may echo a secret, the head loses a
    /// `Content-Encoding` the proxy decodes; one it cannot decode is refused (a 502: returns false).
    private func planBodyScrub(_ x: ExchangeContext, secrets: [String]) -> Bool {
        switch BodyScrub.plan(
            secrets: secrets, contentType: x.responseHead.string(of: "content-type"),
            contentEncoding: x.responseHead.string(of: "content-encoding"))
        {
        case .relay:
            x.bodyScrub = nil
        case .scrub(let scrub, let decodes):
            x.bodyScrub = scrub
            if decodes { x.responseHead.dropContentEncoding() }
        case .refuse(let why):
            refuseUnscrubbable(why)
            return false
        }
        return true
    }

    /// A body that may carry a secret cannot be searched (an encoding the proxy cannot decode, data that is not
    /// what its encoding says): nothing more of it is relayed. Before the head went out the client gets a 502;
    /// after, the connection is cut (the client sees a truncated answer, never the secret).
    private func refuseUnscrubbable(_ why: String) {
        let credential = ex?.credential?.name ?? ex?.gatewayCredential?.name ?? "-"
        let destination = ex?.transfer?.destination ?? ex?.upstreamURL.map { "\($0.urlHost):\($0.port)" } ?? "-"
        logger.warning(
            "response not relayed: its body could not be scrubbed of the credential's secrets",
            metadata: [
                "client": "\(peer)", "destination": "\(destination)", "credential": "\(credential)", "cause": "\(why)",
            ])
        cancelTransfer()
        run(
            machine.responseHeadRefused(),
            answer: ErrorResponse(
                status: 502, message: "Upstream \(destination) sent a response the proxy could not scrub: \(why)",
                details: [
                    "Credential '\(credential)' masks its secrets in response bodies (scrub_responses); a body that "
                        + "cannot be searched is not relayed."
                ]))
    }

    /// Masks the injected token wherever it is echoed in the response head: a redirect's URL, nested in its
    /// `ReturnUrl=`, a `Link` or a `Set-Cookie` would hand it to the client and whatever host it follows the
    /// redirect to (``RedirectTokenScrub``).
    func maskInjectedToken(in x: ExchangeContext, token: String) {
        guard x.responseHead.mayHold(token: token), let finder = EncodedTokenFinder(token) else { return }
        x.responseHead.rewriteValues(minLength: token.utf8.count) {
            RedirectTokenScrub.clean($0, finder: finder, token: token, isURLField: $1)
        }
    }

    /// An upstream head that a lenient client could read differently from libcurl (RFC 9112): it is never relayed.
    /// The transfer is stopped (libcurl closes that upstream connection) and the exchange fails as the machine says
    /// (a 502, the connection kept when its request was read to the end).
    func refuseResponseHead(_ violation: ResponseHeadAssembler.Violation) {
        let destination = ex?.transfer?.destination ?? ex?.upstreamURL.map { "\($0.urlHost):\($0.port)" } ?? "-"
        logger.warning(
            "upstream response refused",
            metadata: [
                "client": "\(peer)", "destination": "\(destination)",
                "cause": "\(violation)",
            ])
        ProxyMetrics.active?.upstreamError(.protocolError)
        cancelTransfer()
        run(
            machine.responseHeadRefused(),
            answer: ErrorResponse(
                status: 502, message: "Upstream \(destination) sent an invalid response: \(violation)",
                details: ["The response was not relayed (RFC 9112)."]))
    }

    /// Writes the held response head, if any, followed by `tail`.
    func flushHead(then tail: StaticString = "") {
        if let x = ex, !x.heldHead.isEmpty {
            if tail.utf8CodeUnitCount > 0 {
                x.heldHead.append(UnsafeRawBufferPointer(start: tail.utf8Start, count: tail.utf8CodeUnitCount))
            }
            x.heldHead.withUnreadBytes { send($0) }
            x.heldHead.removeAll()
        } else if tail.utf8CodeUnitCount > 0 {
            send(UnsafeRawBufferPointer(start: tail.utf8Start, count: tail.utf8CodeUnitCount))
        }
    }

    /// Writes response body bytes, after the held head if it has not gone out, as a chunk when the response is
    /// re-framed chunked.
    func writeBody(_ bytes: UnsafeRawBufferPointer) {
        guard let x = ex else { return }
        let chunked = machine.framing?.chunked ?? false
        x.heldHead.withUnreadBytes { head in loop.writeBody(bytes, head: head, chunked: chunked) { send($0) } }
        x.heldHead.removeAll()
        x.bodyBytesOut += Int64(bytes.count)
    }

    func transferDidReceiveBody(_ bytes: UnsafeRawBufferPointer) -> BodyAcceptance {
        ex?.capture?.bodyBytes(bytes)
        guard let scrub = ex?.bodyScrub else { return relayBody(bytes) }
        // A scrubber cannot give back bytes it has taken: a full client queue pauses the transfer before, and what
        // it emits is relayed whatever the queue holds then (at most one read, decoded).
        guard machine.upstreamBodyMayFlow(clientPending: channel.pendingCount, now: now) else { return .pause }
        var result = BodyAcceptance.accepted
        do throws(BodyScrub.Failure) {
            try scrub.feed(bytes) { piece in
                if case .accepted = result { result = relayBody(piece, forced: true) }
            }
        } catch {
            refuseUnscrubbable(error.message)
            return .abort
        }
        return result
    }

    /// The end of a scrubbed body: what the scrubber held back goes out. False when the body could not be completed
    /// (the exchange has failed then).
    private func finishBodyScrub() -> Bool {
        guard let x = ex, let scrub = x.bodyScrub else { return true }
        x.bodyScrub = nil
        var result = BodyAcceptance.accepted
        do throws(BodyScrub.Failure) {
            try scrub.finish { piece in
                if case .accepted = result { result = relayBody(piece, forced: true) }
            }
        } catch {
            refuseUnscrubbable(error.message)
            return false
        }
        if case .accepted = result { return true }
        close()
        return false
    }

    /// `forced`: relayed whatever the client's queue holds (bytes a scrubber has already taken).
    private func relayBody(_ bytes: UnsafeRawBufferPointer, forced: Bool = false) -> BodyAcceptance {
        // A head not committed yet (a 401 that turns out final because a body follows it) is committed first.
        if machine.preparationForBody == .commitHead, !commitResponseHead(inspect: false) { return .abort }
        switch machine.upstreamBody(
            count: bytes.count, clientPending: forced ? 0 : channel.pendingCount,
            clientFailed: channel.failed || channel.isClosed, now: now)
        {
        case .commitHeadFirst, .abort:
            return .abort
        case .hold:
            ex?.sniffBuffer.append(contentsOf: bytes)
            return .accepted
        case .writeHeld(let held):
            // Token errors are small: a held body this large is the real answer, and these bytes follow it.
            writeHeldBody(bytes: held)
            writeBody(bytes)
            return channel.failed ? .abort : .accepted
        case .discard:
            return .accepted
        case .pause:
            return .pause
        case .write:
            writeBody(bytes)
            return channel.failed ? .abort : .accepted
        }
    }

    /// Writes the held head and the `count` body bytes held with it.
    private func writeHeldBody(bytes count: Int) {
        guard let x = ex else { return }
        let held = x.sniffBuffer
        x.sniffBuffer = []
        precondition(held.count == count)
        held.withUnsafeBytes { writeBody($0) }
    }

    func transferDidFinish(error: UpstreamError?) {
        ex?.transfer = nil
        ex?.capture?.transferEnded(error: error.map { $0.detail.isEmpty ? $0.response.message : $0.detail })
        if error == nil {
            // Before the machine hears of the end: the held-back bytes are still part of the transfer's body.
            guard finishBodyScrub() else { return }
            // A head that never became final is committed; a held body is looked at for a token error (a
            // rejection refreshes the token and the exchange goes on without this end).
            if machine.preparationForEnd == .commitHead, !commitResponseHead(inspect: false) { return }
            if machine.preparationForEnd == .inspectHeld {
                if heldResponseRejected() { return }
                releaseHeldResponse()
            }
        }
        if let x = ex, let trace = x.trace {
            trace.endAttempt(status: x.responseHead.status, error: error.map { ExchangeTrace.errorType($0) })
        }
        let end = ExchangeStateMachine.TransferEnd(
            error, retryable: context.retryPolicy.isEnabled && ex?.attempt?.resendable == true)
        var verdict = RetryVerdict.refused
        if let x = ex, let cause = end.retryCause, machine.considersRetry(cause) {
            verdict = retryVerdict(x, cause: cause, retryAfter: nil)
        }
        let step = machine.transferEnded(end, verdict: verdict)
        if let error {
            if step.isUpstreamFailure { countUpstreamFailure(error) }
            // Rate-limited: when descriptors run out, every request would log a line.
            if let e = error.outOfDescriptors {
                context.descriptors.report(.upstream, error: e, logger: logger, now: now)
            }
        } else {
            warnRefusedNetworkCredential()
        }
        switch step {
        case .close:
            close()
        case .retry(let serial, let wait):
            // A failure that is retried logs its own line.
            guard let x = ex, let error, let cause = end.retryCause else {
                preconditionFailure("a retry without a failure")
            }
            scheduleRetry(
                x, serial: serial, after: wait, cause: cause,
                detail: error.detail.isEmpty ? error.response.message : error.detail)
        case .failed(let failure):
            // Only an upstream failure fails the exchange, and it comes with its error.
            guard let error else { preconditionFailure("a transfer failed without an error") }
            if error.outOfDescriptors == nil, failure != .close {
                logger.warning(
                    "upstream failed",
                    metadata: [
                        "client": "\(peer)", "destination": "\(error.destination)",
                        "cause": "\(error.detail.isEmpty ? error.response.message : error.detail)",
                    ])
            }
            run(failure, answer: error.response)
        case .complete(let framing, let then):
            tokenAccepted()
            flushHead(then: framing.chunked ? "0\r\n\r\n" : "")
            finishExchange()
            run(then)
        }
    }

    /// Looks at the held body for a token error: true when the token was rejected and is being refreshed or
    /// explained (``tokenRejected(layer:)``), so the held answer is not relayed.
    private func heldResponseRejected() -> Bool {
        guard let x = ex, let c = x.credential else { return false }
        let verdict = c.kind.rejection(of: responseView(x, c), body: x.sniffBuffer)
        if let note = verdict.note {
            var metadata: Logger.Metadata = ["credential": "\(c.name)", "status": "\(x.responseHead.status)"]
            for (k, v) in verdict.details { metadata[k] = "\(v)" }
            logger.warning("\(note)", metadata: metadata)
        }
        // A kind with nothing to obtain again only explains: no retry could change the answer.
        return verdict.rejected && c.kind.tokenSource != .none && tokenRejected()
    }

    /// An upstream failure in the metrics (a destination `deny_destinations` refused is counted as a refusal).
    private func countUpstreamFailure(_ error: UpstreamError) {
        guard let m = ProxyMetrics.active else { return }
        if error.deniedAddress != nil, error.cause == .connect {
            m.denied(.destination)
        } else {
            m.upstreamError(error.metricCause)
        }
    }

    /// A final 401 although the proxy logs in with a password or Kerberos: the log says whether the credential could
    /// not answer the schemes offered or was refused.
    private func warnRefusedNetworkCredential() {
        guard let x = ex, x.responseHead.status == 401, x.networkAuth.logsIn, let url = x.upstreamURL
        else { return }
        let challenges = AuthChallenge.parse(fields: x.responseHead.values(of: "www-authenticate"))
        let https = url.scheme == "https"
        // The own client answers Digest itself, and says why it could not.
        let hasBody = x.head.map { $0.framing != .none && $0.framing != .contentLength(0) } ?? false
        let cause =
            x.client == .own
            ? x.networkAuth.password?.unanswerable(challenges: challenges, overHTTPS: https, hasBody: hasBody)
            : x.networkAuth.password?.unanswerable(offered: challenges.map(\.scheme), overHTTPS: https)
        if let cause {
            logger.warning(
                "the network credential cannot answer the upstream's challenge",
                metadata: [
                    "url": "\(url.origin)\(url.path)", "credential": "\(x.networkAuth.passwordName ?? "-")",
                    "cause": "\(cause)",
                ])
        } else {
            logger.warning(
                "upstream refused the network credential",
                metadata: [
                    "url": "\(url.origin)\(url.path)",
                    "credential": "\(x.networkAuth.passwordName ?? context.kerberosCredentialName ?? "kerberos")",
                ])
        }
    }
}
