import Dispatch

/// One of the proxy's own requests to a token service while a capture records the credential it is for: the
/// request, redacted when it starts (``CaptureEntryBuilder/tokenServiceRequest(method:url:headers:form:credential:)``),
/// and the answer, redacted when it ends. Held by its ``HTTPFetch``, on that fetch's queue.
struct CaptureFetchDraft {
    let credential: String
    private let request: HAR.Request
    private let startedMillis: Int64
    private let startedNanos = DispatchTime.now().uptimeNanoseconds
    private var firstByteNanos: UInt64 = 0

    init(credential: String, request: HAR.Request, nowMillis: Int64) {
        self.credential = credential
        self.request = request
        self.startedMillis = nowMillis
    }

    mutating func responseBegan() {
        if firstByteNanos == 0 { firstByteNanos = DispatchTime.now().uptimeNanoseconds }
    }

    /// Records the exchange: `status` 0 with `failure` when no answer came.
    func finish(status: Int, headers: [(name: String, value: String)], body: [UInt8], failure: String?) {
        let end = DispatchTime.now().uptimeNanoseconds
        let firstByte = firstByteNanos == 0 ? end : firstByteNanos
        let timings = HAR.Timings(
            send: 0, wait: Double(firstByte &- startedNanos) / 1_000_000, receive: Double(end &- firstByte) / 1_000_000)
        let response =
            status == 0
            ? CaptureEntryBuilder.noResponse(failure ?? "no answer from the token service")
            : CaptureEntryBuilder.tokenServiceResponse(
                status: status, headers: headers, body: body, credential: credential)
        let entry = HAR.Entry(
            startedDateTime: rfc3339(millis: startedMillis, fraction: true), time: timings.wait + timings.receive,
            request: request, response: response, timings: timings, clientRequest: nil,
            authproxy: HAR.Annotation(
                role: "token-service", credential: credential, exchange: nil, attempt: nil,
                notes: failure.map { ["request failed: \($0)"] }))
        CaptureRecorder.shared.record(entry, startedMillis: startedMillis)
    }
}
