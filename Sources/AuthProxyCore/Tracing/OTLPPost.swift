import Dispatch

/// One OTLP/HTTP export: POSTs an `application/x-protobuf` body and reports whether the endpoint took it (2xx).
/// Runs on its ``CurlMulti``'s queue and keeps itself alive until done. The endpoint's answer body (an
/// `ExportTraceServiceResponse`, or an error text) is read only up to a few KiB, to name the cause of a refusal.
final class OTLPPost: UpstreamExchangeDelegate {
    enum Outcome {
        case success
        case failure(String)
    }

    private let multi: CurlMulti
    private let url: String
    private var body: HeldRequestBody
    private let headers: [TracingConfig.Header]
    private let timeoutMillis: Int
    private let trust: ServerTrustSettings?
    private var status = 0
    private var answer: [UInt8] = []
    private var completion: ((Outcome) -> Void)?
    private var transfer: CurlTransfer?
    private var keepAlive: OTLPPost?
    static let answerLimit = 4096

    init(
        multi: CurlMulti, url: String, body: [UInt8], headers: [TracingConfig.Header], timeoutMillis: Int,
        trust: ServerTrustSettings? = nil, completion: @escaping (Outcome) -> Void
    ) {
        self.trust = trust
        self.multi = multi
        self.url = url
        self.body = HeldRequestBody(body)
        self.headers = headers
        self.timeoutMillis = timeoutMillis
        self.completion = completion
    }

    func start() {
        keepAlive = self
        var fields = HTTPHeaders([
            ("Content-Type", "application/x-protobuf"), ("User-Agent", "authproxy/\(AuthProxyVersion.string)"),
        ])
        for h in headers { fields.setInjected(name: h.name, value: h.value) }
        let seconds = max(1, (timeoutMillis + 999) / 1000)
        var request = UpstreamRequest(
            method: "POST", url: url, fields: fields, bodyLength: Int64(body.count), timeoutSeconds: seconds)
        request.totalTimeoutSeconds = seconds
        request.harmlessToRepeat = true
        // The endpoint's own CA (`ca_file`), added to the system's.
        request.network.trust = trust
        let destination = HTTPURL.parse(url).map { "\($0.target.urlHost):\($0.target.port)" } ?? url
        let t = CurlTransfer(multi: multi, request: request, destination: destination, delegate: self)
        transfer = t
        t.start()
    }

    func transferDidReceiveHeaderLine(_ raw: UnsafeRawBufferPointer) {
        guard raw.count > 5, raw.starts(with: "HTTP/".utf8) else { return }
        let line = String(decoding: raw, as: UTF8.self)
        let parts = line.split(separator: " ")
        status = parts.count > 1 ? Int(parts[1]) ?? 0 : 0
        answer = []
    }

    func transferDidReceiveBody(_ bytes: UnsafeRawBufferPointer) -> BodyAcceptance {
        if answer.count < Self.answerLimit { answer += bytes.prefix(Self.answerLimit - answer.count) }
        return .accepted
    }

    func transferNeedsBody(_ buffer: UnsafeMutableRawBufferPointer) -> BodySupply {
        body.supply(buffer)
    }

    func transferRewindBody() -> Bool {
        body.rewind()
        return true
    }

    func transferDidFinish(error: UpstreamError?) {
        let done = completion
        completion = nil
        transfer = nil
        if let error {
            done?(.failure(error.detail.isEmpty ? error.response.message : error.detail))
        } else if (200..<300).contains(status) {
            done?(.success)
        } else {
            // A collector's error answer is text or a protobuf Status: the printable part names the cause.
            let text = String(decoding: answer.filter { $0 >= 0x20 && $0 < 0x7F }, as: UTF8.self)
            done?(.failure("HTTP \(status)\(text.isEmpty ? "" : ": \(text.prefix(200))")"))
        }
        keepAlive = nil
    }
}
