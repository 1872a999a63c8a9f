import CAuthProxyShims
import CCurl
import Dispatch
import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// Token-type credentials on a forwarded request: matching, token injection, and the one retry after a
/// token rejection (with the request body replayed).
extension ClientConnection {
    /// Carries out the ``RequestPlanner``'s plan for a forwarded request: its local answer, or the rate limit,
    /// the body's replay copy, and the transfer (after the token, when one goes in).
    func forward(_ url: URLTarget) {
        // A fresh context (``begin(_:)``): the credential, token, replay and form fields are unset.
        guard let x = ex, let h = x.head else { return }
        x.originalURL = url
        let store = credentials
        var plan = ForwardPlan(url: url)
        if let a = RequestPlanner.plan(
            h, url: url, store: store,
            settings: .init(
                unmatched: context.config.unmatched,
                maxReplayBytes: context.config.maxReplayBytes, routing: context.routing,
                denyDestinations: context.routing == nil ? [] : context.access.denyDestinations,
                ownVia: context.routing == nil ? nil : context.viaValue, httpClient: context.config.httpClient,
                ownsUpstreams: ownUpstreams != nil),
            into: &plan)
        {
            if let reason = a.denied { ProxyMetrics.active?.denied(reason) }
            respond(a.error, close: false, extraHeaders: a.extraHeaders)
            return
        }
        if plan.routePending, let routing = context.routing {
            awaitRoute(routing, url: url, target: plan.upstreamURL)
            return
        }
        let rateLimitTargets = context.access.hasRateLimits ? plan.rateLimitTargets : []
        x.gatewayCredential = plan.gateway
        // Moved, not copied: the plan is large (three URLs, the network credentials, the route).
        x.plan = consume plan
        if context.access.hasRateLimits {
            let checks = limitChecks(store: store, targets: rateLimitTargets)
            switch passLimits(checks, from: 0) {
            case .refused(let error, let retryAfter):
                respond(error, close: false, extraHeaders: "Retry-After: \(retryAfter)\r\n")
                return
            case .pending:
                return
            case .passed:
                break
            }
        }
        admitAfterLimits()
    }

    /// The request passed its rate limits and quotas: its concurrency slots, then the rest.
    func admitAfterLimits() {
        guard let x = ex else { return }
        if !context.access.caps.isEmpty {
            admitUpstream(concurrencyKeys(store: credentials, plan: x.plan!), from: 0)
            return
        }
        forwardAdmitted()
    }

    /// The request passed its limits (and holds its concurrency slots): the body's replay copy, the token, the
    /// transfer.
    func forwardAdmitted() {
        // Read through optional chaining: `x.plan != nil` and `x.plan!` copied the whole plan (a profile's memcpy).
        guard let x = ex, let h = x.head, let holdsBody = x.plan?.holdsBody else { return }
        if let limit = x.plan?.replayLimit { x.replay = ReplayBuffer(limit: limit, directory: context.config.stateDir) }
        x.credential = x.plan?.service
        if holdsBody, case .contentLength(let n) = h.framing {
            // The credential goes into the body or covers it (a form field, a payload hash), or a print job's web map
            // gets its layers' tokens: collect it whole first (small by the kind's or the print job's bound), then
            // apply.
            x.formBody = []
            x.formBody!.reserveCapacity(Int(n))
            if machine.continueDue() { send("HTTP/1.1 100 Continue\r\n\r\n") }
            if machine.collectForm() { pumpBody() } else { formCollected() }
            return
        }
        if x.plan?.print != nil {
            printJob()
            return
        }
        obtainToken()  // the service's and the gateway's, if any
    }

    /// The PAC file has not been asked about `target` lately: it is evaluated on the PAC engine's queue (a PAC may
    /// resolve names, which blocks) while this loop goes on; the request body, if any, is buffered meanwhile as
    /// while a token is obtained (reading pauses when the buffers are full). With the answer cached, the request
    /// is planned again from the start, unless the exchange ended or the connection closed meanwhile.
    private func awaitRoute(_ routing: ParentRouting, url: URLTarget, target: URLTarget) {
        guard let serial = machine.routeRequested() else { return }
        ex?.trace?.beginPac(host: target.host)
        let me = LoopBound(self, queue: loop.queue)
        routing.evaluate(scheme: target.scheme, host: target.host, port: target.port) {
            me.queue.async {
                guard me.value.machine.awaitsRoute(serial: serial) else { return }
                me.value.ex?.trace?.endPac()
                me.value.forward(url)
                // Planned again, the request may have been answered at once (a refusal, a rate limit).
                me.value.run(me.value.machine.continuationAfterCallback)
            }
        }
    }

    /// The held body is complete: the kind looks for the client's own credential in it, then ours is obtained.
    func formCollected() {
        guard let x = ex, let h = x.head, let url = x.originalURL else { return }
        if let c = x.credential, !c.overrideClientToken {
            var view = RequestView(
                method: h.method, target: url, fields: h.headers, bodyLength: x.formBody.map { Int64($0.count) },
                isUpgrade: h.upgrade != nil, placement: c.placement)
            view.body = x.formBody
            if c.kind.prepare(view).clientHasOwn { x.credential = nil }
        }
        if x.plan?.print != nil {
            printJob()
            return
        }
        obtainToken()
    }

    /// Obtains the tokens the request carries, the gateway layer's first, then starts the transfer.
    func obtainToken() {
        // The token service is reached through the URL the request really goes to (https under
        // upgrade_to_https), so a password never travels to an http:// token service the client named.
        guard let x = ex, let url = x.upstreamURL ?? x.originalURL else { return }
        let layer: Credential.Layer
        switch TokenLayers.next(
            gatewayNeedsToken: x.gatewayToken == nil && (x.gatewayCredential?.kind.tokenSource ?? .none) != .none,
            serviceNeedsToken: x.injectedToken == nil && (x.credential?.kind.tokenSource ?? .none) != .none)
        {
        case .obtain(let l): layer = l
        case .transfer:
            if let h = x.head { startTransfer(url: url, headers: h.headers) }
            return
        }
        guard let c = layer == .gateway ? x.gatewayCredential : x.credential else { return }
        guard let tokens = context.tokens, let serial = machine.tokenRequested() else { return }
        if let t = tokens.cachedToken(for: c, target: url) {
            tokenReady(.success(t), layer: layer)
            return
        }
        let trace = x.trace?.beginTokenWait(credential: c.name, layer: layer.rawValue)
        let me = LoopBound(self, queue: loop.queue)
        tokens.token(for: c, target: url, trace: trace) { result in
            me.queue.async {
                guard me.value.machine.awaitsToken(serial: serial) else { return }
                if let t = me.value.ex?.trace {
                    var failed: String? = nil
                    if case .failure = result { failed = "token_unavailable" }
                    t.endTokenWait(trace, error: failed)
                }
                me.value.tokenReady(result, layer: layer)
            }
        }
    }

    func tokenReady(_ result: Result<IssuedToken, TokenError>, layer: Credential.Layer = .service) {
        if layer == .gateway {
            gatewayTokenReady(result)
            return
        }
        guard let x = ex else { return }
        switch result {
        case .failure(let e):
            if x.retry != nil { x.retry?.result = "token_failure" }
            run(machine.tokenUnusable(), answer: e.response)
        case .success(let t):
            // Applied where every credential is, on the request as it goes upstream (``startTransfer``).
            x.injectedToken = t
            x.injectedTokenRejected = false
            obtainToken()
        }
    }

    /// The gateway layer's token: with it, the service's is obtained next (or the transfer starts).
    private func gatewayTokenReady(_ result: Result<IssuedToken, TokenError>) {
        guard let x = ex else { return }
        switch result {
        case .failure(let e):
            if x.retry != nil { x.retry?.result = "token_failure" }
            run(machine.tokenUnusable(), answer: e.response)
        case .success(let t):
            x.gatewayToken = t
            x.gatewayTokenRejected = false
            obtainToken()
        }
    }

    /// The upstream rejected the token injected for `layer` (for the service: 498/499 in any form, or a redirect to
    /// sign in; for an `oauth2` token: its rejection signal). Returns true when the proxy takes over
    /// (a retry with a fresh token and the replayed body, or a clear error for a pregenerated token or a server that
    /// keeps redirecting to sign in); false
    /// when the rejection is relayed as is (the held response is released and the transfer goes on).
    @discardableResult
    func tokenRejected(layer: Credential.Layer = .service) -> Bool {
        guard let x = ex, let url = x.originalURL, let tokens = context.tokens,
            let c = layer == .gateway ? x.gatewayCredential : x.credential,
            let t = layer == .gateway ? x.gatewayToken : x.injectedToken
        else { return false }
        if let m = ProxyMetrics.active {
            m.tokenRejected(credential: c.name)
            if x.retry != nil { x.retry?.result = "rejected" }
        }
        // Behind web-tier or SAML authentication the rejection is a redirect to sign in: a login page, never relayed.
        let signIn = layer == .service ? signInRedirect(x, c) : nil
        if let signIn {
            logger.info(
                "the server redirects to sign in: the token counts as rejected",
                metadata: [
                    "credential": "\(c.name)", "url": "\(url.origin)\(url.path)", "sign_in": "\(signIn.rawValue)",
                ])
        }
        var replayImpossible: String? = nil
        if let r = x.replay, r.overflowed {
            replayImpossible =
                r.failure
                ?? "the request body is larger than max_replay_bytes (\(context.config.maxReplayBytes)) and cannot be replayed"
        }
        // The decision (one refresh and one retry; back off when the server rejects fresh tokens) is
        // TokenRetryPolicy's, applied by the token service.
        let action = tokens.rejected(
            c, target: x.upstreamURL ?? url, token: t,
            attempt: TokenLayers.attempt(
                layerRetried: layer == .gateway ? x.gatewayTokenRetried : x.serviceTokenRetried),
            replayImpossible: replayImpossible)
        var signInRequired: ErrorResponse? = nil
        if case .relay(let reason, _) = action, let signIn {
            signInRequired = Self.signInRequired(credential: c.name, to: signIn, reason: reason)
            logger.warning(
                "the server still redirects to sign in: answering 502",
                metadata: [
                    "credential": "\(c.name)", "url": "\(url.origin)\(url.path)", "sign_in": "\(signIn.rawValue)",
                    "reason": "\(reason)",
                ])
        } else if case .relay(let reason, let serverRejectsNewTokens) = action {
            if layer == .gateway { x.gatewayTokenRejected = true } else { x.injectedTokenRejected = true }
            logger.log(
                level: serverRejectsNewTokens || replayImpossible != nil ? .warning : .info,
                "token rejected, relaying the rejection",
                metadata: [
                    "credential": "\(c.name)", "layer": "\(layer.rawValue)",
                    "url": "\(url.origin)\(url.path)", "status": "\(x.responseHead.status)", "reason": "\(reason)",
                ])
            releaseHeldResponse()
            return false
        }
        // Stop the transfer now; answer or retry on the next turn of the loop (starting a transfer or
        // answering from inside a libcurl callback is not allowed).
        // The clear error that replaces the rejection, when the proxy answers instead of retrying.
        let answer: ErrorResponse?
        switch action {
        case .explainPregenerated:
            answer = ErrorResponse(
                status: 502,
                message: "Credential '\(c.name)': the upstream rejected its pregenerated token (expired or revoked)",
                details: [
                    "Renew it: generate a new token, put it in proxy.conf and reload (SIGHUP, POST /reload) or restart authproxy."
                ])
        case .answer(let e):
            answer = e
        case .refreshAndRetry, .relay:
            answer = signInRequired
        }
        guard case .cancelAndReschedule(let serial) = machine.tokenRejection(answer == nil ? .retry : .explain)
        else { return false }
        if answer == nil, let trace = x.trace { trace.beginReplay(credential: c.name, status: x.responseHead.status) }
        cancelTransfer()
        dropResponse()
        onNextTurn { me in
            switch me.machine.scheduledStep(serial: serial) {
            case .none:
                return
            case .explain:
                if let answer { me.run(me.machine.tokenUnusable(), answer: answer) }
            case .retry:
                me.retryWithFreshToken(layer: layer)
            }
        }
        return true
    }

    /// The sign-in the response redirects to, when it rejects the injected token that way (``SignInRedirect``): for
    /// the kinds whose tokens a web tier may guard (``CredentialKind/signInRedirect(of:)``), only on a request that
    /// carried one.
    func signInRedirect(_ x: ExchangeContext, _ c: Credential) -> SignInRedirect.Target? {
        let status = x.responseHead.status
        guard status >= 300, status < 400, x.injectedToken != nil else { return nil }
        return c.kind.signInRedirect(of: responseView(x, c))
    }

    /// The response head as ``CredentialKind`` reads it.
    func responseView(_ x: ExchangeContext, _ c: Credential) -> ResponseView {
        ResponseView(
            request: x.upstreamURL ?? x.originalURL ?? URLTarget(scheme: "http", host: "", port: 80, pathAndQuery: "/"),
            head: x.responseHead)
    }

    /// The answer when the server keeps redirecting to sign in (a fresh token did not help, or no retry may
    /// follow): the login page is never relayed to a GIS client, which could not use it.
    static func signInRequired(credential: String, to target: SignInRedirect.Target, reason: String) -> ErrorResponse {
        let whereTo: String
        switch target {
        case .portal: whereTo = "the portal's sign-in"
        case .saml: whereTo = "a SAML identity provider"
        case .configured: whereTo = "its identity provider (sign_in_urls)"
        }
        return ErrorResponse(
            status: 502,
            message:
                "Credential '\(credential)': sign-in required: the server redirects to \(whereTo) instead of accepting its token",
            details: [
                "The redirect (a login page) was not relayed (\(reason)). Check that the credential's user may use this service, that the web tier accepts ArcGIS tokens, and the credential's referer binding."
            ])
    }

    /// The exchange completed without a token error: the server accepts the token it carried (see
    /// ``TokenService/accepted(_:target:token:)``).
    func tokenAccepted() {
        guard let x = ex else { return }
        if x.stacksGateway, !x.gatewayTokenRejected, let t = x.gatewayToken, let g = x.gatewayCredential,
            let url = x.upstreamURL ?? x.originalURL, let tokens = context.tokens
        {
            tokens.accepted(g, target: url, token: t)
        }
        guard !x.injectedTokenRejected, let t = x.injectedToken, let c = x.credential,
            c.isRefreshable || c.retriesRejections,
            let url = x.upstreamURL ?? x.originalURL, let tokens = context.tokens
        else { return }
        tokens.accepted(c, target: url, token: t)
    }

    /// Retries the request with a fresh token for `layer`; the other layer's token is taken again as it is (from
    /// the cache).
    func retryWithFreshToken(layer: Credential.Layer) {
        guard let x = ex, let url = x.originalURL,
            let c = layer == .gateway ? x.gatewayCredential : x.credential
        else { return }
        logger.info(
            "token rejected, refreshing and retrying",
            metadata: ["credential": "\(c.name)", "layer": "\(layer.rawValue)", "url": "\(url.origin)\(url.path)"])
        if layer == .gateway {
            x.gatewayToken = nil
            x.gatewayTokenRetried = true
        } else {
            x.injectedToken = nil
            x.serviceTokenRetried = true
        }
        x.retry = (c.name, nil)
        x.responseHead.reset()
        x.replayOffset = 0
        x.formOffset = 0
        obtainToken()
    }

    /// Stops holding: the held head and body go to the client, and the transfer streams on.
    func releaseHeldResponse() {
        guard let x = ex else { return }
        switch machine.releaseHeld(transferLive: x.transfer != nil) {
        case .keep:
            return
        case .flushHead:
            flushHead()
        case .writeHeld(let n):
            let held = x.sniffBuffer
            x.sniffBuffer = []
            precondition(held.count == n)
            held.withUnsafeBytes { writeBody($0) }
        }
    }
}
