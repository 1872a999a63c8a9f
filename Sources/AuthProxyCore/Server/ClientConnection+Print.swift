import Logging
import Synchronization

/// A print job to a listed print service (``PrintRequest``): the tokens of its web map's secured layers are obtained
/// (parked like the request's own token: nothing blocks the loop) and written into `Web_Map_as_JSON` before the
/// request goes upstream; then the request's own credentials are obtained as for any request.
extension ClientConnection {
    /// The tokens handed to each print service lately, for every loop (``PrintTokenLedger``).
    static let printLedger = Mutex(PrintTokenLedger())

    /// The web map and the layers waiting for their tokens.
    struct PrintJob {
        var request: PrintRequest
        /// The form body or query string the web map came in, and the web map itself.
        var fields: [UInt8]
        var json: [UInt8]
        var wanted: [PrintTokenPlan.Wanted]
        var got: [IssuedToken] = []
    }

    /// Reads the print job's web map (held form body or query) and obtains its layers' tokens; a web map that cannot
    /// be read, or whose layers need none, goes as the client sent it.
    func printJob() {
        guard let x = ex, let decision = x.plan?.print, let plan = x.plan else { return }
        let request: PrintRequest
        x.printSecrets = Self.printLedger.withLock { $0.tokens(service: decision.service, now: nowMillis()) }
        switch decision {
        case .echoes:
            obtainToken()
            return
        case .tooLarge(let service, let why):
            logger.warning(
                "print job forwarded as sent: its web map was not read, its secured layers get no token",
                metadata: [
                    "print_service": "\(service)", "url": "\(plan.upstreamURL.origin)\(plan.upstreamURL.path)",
                    "reason": "\(why)",
                ])
            obtainToken()
            return
        case .rewrite(let r):
            request = r
        }
        let fields: [UInt8]
        switch request.carrier {
        case .form:
            fields = x.formBody ?? []
        case .query:
            let pq = plan.upstreamURL.pathAndQuery
            fields = plan.upstreamURL.queryStart.map { Array(pq[pq.index(after: $0)...].utf8) } ?? []
        }
        let json: [UInt8]
        switch FormFields.lookup(PrintRequest.webMapField, in: fields) {
        case .absent:
            obtainToken()
            return
        case .ambiguous:
            printJobUnread(request, why: "Web_Map_as_JSON occurs more than once")
            return
        case .value(let v):
            json = v
        }
        let map: WebMapLayers
        do {
            map = try WebMapLayers.read(json)
        } catch {
            printJobUnread(request, why: error.message)
            return
        }
        let wanted = PrintTokenPlan.wanted(map, printTarget: plan.clientMatch, store: credentials)
        guard !wanted.isEmpty, context.tokens != nil else {
            obtainToken()
            return
        }
        nextPrintToken(PrintJob(request: request, fields: fields, json: json, wanted: wanted))
    }

    private func printJobUnread(_ request: PrintRequest, why: String) {
        if let x = ex, let url = x.upstreamURL {
            logger.warning(
                "print job forwarded as sent: its web map could not be read, its secured layers get no token",
                metadata: [
                    "print_service": "\(request.service)", "url": "\(url.origin)\(url.path)", "reason": "\(why)",
                ])
        }
        obtainToken()
    }

    /// Obtains the next layer's token (a cached one at once, else from the token service, the exchange parked
    /// meanwhile), then writes them all in.
    private func nextPrintToken(_ job: PrintJob) {
        guard let tokens = context.tokens else { return }
        var job = job
        while job.got.count < job.wanted.count {
            let w = job.wanted[job.got.count]
            if let t = tokens.cachedToken(for: w.credential, target: w.target) {
                job.got.append(t)
                continue
            }
            guard let serial = machine.tokenRequested() else { return }
            let me = LoopBound(self, queue: loop.queue)
            tokens.token(for: w.credential, target: w.target) { [job] result in
                me.queue.async {
                    guard me.value.machine.awaitsToken(serial: serial) else { return }
                    switch result {
                    case .failure(let e):
                        // The print would fail on this layer at the print service: the token service's answer is
                        // clearer (it names the credential and the cause).
                        me.value.run(me.value.machine.tokenUnusable(), answer: e.response)
                    case .success(let t):
                        var next = job
                        next.got.append(t)
                        me.value.nextPrintToken(next)
                    }
                }
            }
            return
        }
        writePrintTokens(job)
    }

    /// Writes the obtained tokens into the web map, then obtains the request's own credentials.
    private func writePrintTokens(_ job: PrintJob) {
        guard let x = ex, let plan = x.plan else { return }
        let requestReferer = x.credential.flatMap { TokenBinding.of($0)?.referer }
        let ins = PrintTokenPlan.insertions(Array(zip(job.wanted, job.got)), requestReferer: requestReferer)
        for s in ins.skipped {
            logger.warning(
                "print job: a layer token was not put into the web map",
                metadata: [
                    "print_service": "\(job.request.service)", "credential": "\(s.credential)", "layer": "\(s.layer)",
                    "reason": "\(s.why)",
                ])
        }
        guard !ins.tokens.isEmpty else {
            obtainToken()
            return
        }
        let json = WebMapLayers.inserting(ins.tokens, into: job.json)
        let fields = FormFields.replacing(PrintRequest.webMapField, with: json, in: job.fields)
        switch job.request.carrier {
        case .form:
            x.formBody = fields
        case .query:
            let pq = plan.upstreamURL.pathAndQuery
            let path = plan.upstreamURL.queryStart.map { pq[..<$0] } ?? pq[...]
            x.plan?.upstreamURL.pathAndQuery = path + "?" + String(decoding: fields, as: UTF8.self)
        }
        var secrets = x.printSecrets
        for (_, t) in ins.tokens where !secrets.contains(t) { secrets.append(t) }
        x.printSecrets = secrets
        let expiries = Dictionary(job.got.map { ($0.value, $0.expires) }, uniquingKeysWith: { a, _ in a })
        let now = nowMillis()
        Self.printLedger.withLock {
            $0.record(
                service: job.request.service, tokens: ins.tokens.map { ($0.token, expires: expiries[$0.token] ?? nil) },
                now: now)
        }
        x.printReferer = ins.referer
        var names: [String] = []
        for w in job.wanted where !names.contains(w.credential.name) { names.append(w.credential.name) }
        if let url = x.upstreamURL {
            logger.info(
                "print job: layer tokens put into the web map",
                metadata: [
                    "print_service": "\(job.request.service)", "url": "\(url.origin)\(url.path)",
                    "layers": "\(ins.tokens.count)", "credentials": "\(names.joined(separator: ","))",
                ])
        }
        obtainToken()
    }

    /// On the request as it goes upstream: the `Referer` the layer tokens are bound to (the print service sends its
    /// request's `Referer` when it loads the layers); the response comes uncompressed, as it is scrubbed of them.
    func applyPrintJob(_ x: ExchangeContext, to r: inout OutgoingRequest) {
        if let referer = x.printReferer { r.fields.setInjected(name: "Referer", value: referer) }
        r.fields.setInjected(name: "Accept-Encoding", value: "identity")
    }
}
