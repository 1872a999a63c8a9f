/// The capture's hooks on a forwarded exchange (``CaptureRecorder``): each upstream attempt of an exchange whose
/// credential is being recorded becomes a ``CaptureDraft`` held by the exchange. With no capture running the only
/// cost is the recorder's one atomic load in ``ClientConnection/startTransfer(url:headers:)``.
extension ClientConnection {
    /// An attempt of `x` goes upstream as `sent`; `clientForm` is the client's form as it arrived (nil when the body
    /// streams or there is none).
    func captureAttempt(
        _ x: ExchangeContext, head h: RequestHead, url: URLTarget, clientForm: [UInt8]?, sent: OutgoingRequest
    ) {
        if x.capture == nil {
            // Only from an exchange's first attempt: later ones hold the form as the proxy sent it, not the client.
            let first =
                (machine.current?.upstreamRetries ?? 0) == 0 && !x.serviceTokenRetried && !x.gatewayTokenRetried
            guard first else { return }
            let names = [x.credential?.name, x.headerCredential, x.gatewayCredential?.name]
            guard let name = names.first(where: { CaptureRecorder.shared.records($0) }) ?? nil else { return }
            let clientURL: String
            if case .absolute(let u) = h.target { clientURL = u.url } else { clientURL = (x.originalURL ?? url).url }
            let bodyLength: Int64?
            switch h.framing {
            case .contentLength(let n): bodyLength = n
            case .chunked: bodyLength = -1
            case .none: bodyLength = nil
            }
            x.capture = CaptureDraft(
                credential: name,
                client: CaptureEntryBuilder.RequestParts(
                    method: h.method, url: clientURL, headers: h.headers.fields, form: clientForm,
                    bodyLength: bodyLength))
        }
        x.capture?.attemptStarted(
            CaptureEntryBuilder.RequestParts(
                method: sent.method, url: sent.target.url, headers: sent.fields.fields, form: sent.body,
                bodyLength: sent.bodyLength),
            secrets: responseSecrets(x), nowMillis: nowMillis())
    }
}
