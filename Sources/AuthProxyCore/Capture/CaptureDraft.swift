import Dispatch

/// One upstream attempt of a client's exchange while a capture records its credential: the redacted requests
/// (built when the attempt starts), and the answer as it arrives. Held by the ``ExchangeContext``; when the
/// attempt is over (the next attempt starts, or the exchange ends) it becomes a HAR entry for the recorder.
///
/// Confined to the loop queue of the connection that holds it.
final class CaptureDraft {
    let credential: String
    let exchange: Int
    private(set) var attempt = 0
    /// The client's request, redacted; also the base the upstream request is compared with.
    let client: HAR.Request
    private let clientParts: CaptureEntryBuilder.RequestParts
    private var request: HAR.Request
    /// What the proxy put on this attempt's request (tokens, keys), to replace where the answer echoes them.
    private var secrets: [String] = []
    private var startedMillis: Int64 = 0
    private var startedNanos: UInt64 = 0
    private var firstByteNanos: UInt64 = 0
    private var endNanos: UInt64 = 0
    private var status = 0
    private var headers: [(name: String, value: String)] = []
    private var body = CaptureEntryBuilder.Body()
    private var bodyLimit = CaptureEntryBuilder.bodyCap
    private var failure: String?
    private var recorded = true

    init(credential: String, client: CaptureEntryBuilder.RequestParts) {
        self.credential = credential
        self.clientParts = client
        let seen = CaptureEntryBuilder.clientRequest(client)
        self.client = seen
        self.request = seen
        self.exchange = CaptureRecorder.shared.nextExchange()
    }

    /// A new attempt goes upstream as `sent`: the previous one, if any, is recorded first.
    func attemptStarted(_ sent: CaptureEntryBuilder.RequestParts, secrets: [String], nowMillis: Int64) {
        finish()
        attempt += 1
        recorded = false
        request = CaptureEntryBuilder.upstreamRequest(sent, client: clientParts, credential: credential)
        self.secrets = secrets
        // A secret cut by the cap is still replaced whole: keep enough past it (percent-encoded, at most 3×).
        bodyLimit = CaptureEntryBuilder.bodyCap + 3 * (secrets.map(\.utf8.count).max() ?? 0)
        startedMillis = nowMillis
        startedNanos = DispatchTime.now().uptimeNanoseconds
        firstByteNanos = 0
        endNanos = 0
        status = 0
        headers = []
        body = CaptureEntryBuilder.Body()
        failure = nil
    }

    /// A line of the upstream's response head (a status line begins a new head: 1xx and challenges are replaced).
    func headerLine(_ raw: UnsafeRawBufferPointer) {
        let line = String(decoding: raw, as: UTF8.self).trimmingHTTPWhitespace().trimmingCRLF()
        if line.hasPrefix("HTTP/") {
            if firstByteNanos == 0 { firstByteNanos = DispatchTime.now().uptimeNanoseconds }
            let parts = line.split(separator: " ", maxSplits: 2)
            status = parts.count > 1 ? Int(parts[1]) ?? 0 : 0
            headers = []
        } else if let colon = line.firstIndex(of: ":") {
            headers.append(
                (String(line[..<colon]), String(line[line.index(after: colon)...].trimmingHTTPWhitespace())))
        }
    }

    func bodyBytes(_ bytes: UnsafeRawBufferPointer) {
        body.append(bytes, limit: bodyLimit)
    }

    /// The transfer ended; `error`: why it failed, without secrets (an ``UpstreamError``'s detail).
    func transferEnded(error: String?) {
        if endNanos == 0 { endNanos = DispatchTime.now().uptimeNanoseconds }
        if let error { failure = error }
    }

    /// Records the attempt in progress (once).
    func finish() {
        guard !recorded else { return }
        recorded = true
        let end = endNanos == 0 ? DispatchTime.now().uptimeNanoseconds : endNanos
        let firstByte = firstByteNanos == 0 ? end : firstByteNanos
        func ms(_ a: UInt64, _ b: UInt64) -> Double { Double(b &- a) / 1_000_000 }
        let timings = HAR.Timings(send: 0, wait: ms(startedNanos, firstByte), receive: ms(firstByte, end))
        let response =
            status == 0
            ? CaptureEntryBuilder.noResponse(failure ?? "no answer from the upstream")
            : CaptureEntryBuilder.response(
                status: status, headers: headers, body: body, secrets: secrets, credential: credential)
        var notes: [String] = []
        if let failure, status != 0 { notes.append("transfer failed: \(failure)") }
        let entry = HAR.Entry(
            startedDateTime: rfc3339(millis: startedMillis, fraction: true),
            time: timings.send + timings.wait + timings.receive, request: request, response: response,
            timings: timings, clientRequest: client,
            authproxy: HAR.Annotation(
                role: "upstream", credential: credential, exchange: exchange, attempt: attempt,
                notes: notes.isEmpty ? nil : notes))
        secrets = []
        body = CaptureEntryBuilder.Body()
        CaptureRecorder.shared.record(entry, startedMillis: startedMillis)
    }
}
