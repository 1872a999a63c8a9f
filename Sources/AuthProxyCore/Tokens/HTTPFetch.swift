import CCurl
import Dispatch
import Tracing

/// A small request the proxy makes on its own behalf (token services, `rest/info`): the whole response is
/// collected (bounded to ``maxBody``). Runs on a ``CurlMulti``'s queue; keeps itself alive until done.
final class HTTPFetch: UpstreamExchangeDelegate {
    struct Response: Sendable {
        var status: Int
        var contentType: String?
        var body: [UInt8]
        /// The fields of the final response head, in order (`authproxy doctor` reads `WWW-Authenticate`).
        var headers: [(name: String, value: String)] = []
    }

    static let maxBody = 1024 * 1024

    private let multi: CurlMulti
    private let method: String
    private let url: String
    private var form: HeldRequestBody
    private let timeoutSeconds: Int
    private var status = 0
    private var contentType: String?
    private var headers: [(name: String, value: String)] = []
    private var body: [UInt8] = []
    /// With a limit, a longer body is cut there and the response still counts (a probe reads only the start);
    /// without one, a body over ``maxBody`` fails the fetch.
    private let bodyLimit: Int?
    private var truncated = false
    private var transfer: CurlTransfer?
    private var completion: ((Result<Response, FetchError>) -> Void)?
    private var keepAlive: HTTPFetch?
    /// The trace context the request was made in (a token request an exchange waits for, ``TokenFetchSpans``): sent
    /// as `traceparent`, and bound again while the completion runs, so a request that follows from this one (the
    /// token request after `rest/info`) carries it too. nil when tracing is off.
    private let traceContext: InstrumentationContext?

    struct FetchError: Error, Sendable {
        let message: String
        /// Why the transfer failed, when it did (so a caller can tell DNS from TLS from a timeout).
        var failure: UpstreamFailure? = nil
    }

    /// Server trust and network credentials for the request (token services behind an internal CA or IWA).
    private let network: NetworkAuth

    /// The parent proxies it goes through (nil: direct).
    private let route: ParentRoute?

    /// Fields sent besides the fixed ones (`Authorization: Basic` of an OAuth client).
    private let extraHeaders: [(String, String)]

    /// The credential the request is made for, so a capture recording it shows the request (set before
    /// ``start()``); nil for requests no capture shows (PAC files).
    var captureCredential: String?
    private var capture: CaptureFetchDraft?

    init(
        multi: CurlMulti, method: String, url: String, form: [(String, String)]?, timeoutSeconds: Int,
        network: NetworkAuth = NetworkAuth(), route: ParentRoute? = nil, bodyLimit: Int? = nil,
        headers: [(String, String)] = [],
        completion: @escaping (Result<Response, FetchError>) -> Void
    ) {
        extraHeaders = headers
        self.network = network
        self.route = route
        self.bodyLimit = bodyLimit
        self.multi = multi
        self.method = method
        self.url = url
        self.form = HeldRequestBody(form.map { Array(TokenInjection.formEncoded($0).utf8) } ?? [])
        self.timeoutSeconds = timeoutSeconds
        self.completion = completion
        traceContext = ProxyTracing.active == nil ? nil : InstrumentationContext.current
    }

    func start() {
        keepAlive = self
        var fields = HTTPHeaders([
            ("Accept", "application/json"), ("User-Agent", "authproxy/\(AuthProxyVersion.string)"),
        ])
        if method == "POST" { fields.add(name: "Content-Type", value: "application/x-www-form-urlencoded") }
        for (name, value) in extraHeaders { fields.add(name: name, value: value) }
        if let traceContext, let tracer = ProxyTracing.active {
            tracer.inject(traceContext, into: &fields, using: HTTPHeadersInjector())
        }
        // The proxy's own requests pass the check every client request passes (``OutboundHead``): a gateway token
        // or a header credential goes into these heads too. Answered on a later turn, as a transfer would be.
        let pathAndQuery = HTTPURL.parse(url)?.target.pathAndQuery ?? ""
        if let problem = OutboundHead.problem(method: method, target: pathAndQuery, fields: fields) {
            let hop = LoopBound(completion, queue: multi.queue)
            completion = nil
            keepAlive = nil
            multi.queue.async { hop.value?(.failure(FetchError(message: "not sent: \(problem.message)"))) }
            return
        }
        if let name = captureCredential, CaptureRecorder.shared.records(name) {
            capture = CaptureFetchDraft(
                credential: name,
                request: CaptureEntryBuilder.tokenServiceRequest(
                    method: method, url: url, headers: fields.fields, form: method == "POST" ? form.bytes : nil,
                    credential: name),
                nowMillis: nowMillis())
        }
        let destination = HTTPURL.parse(url).map { "\($0.target.urlHost):\($0.target.port)" } ?? url
        var request = UpstreamRequest(
            method: method, url: url, fields: fields,
            bodyLength: method == "POST" ? Int64(form.count) : nil, timeoutSeconds: timeoutSeconds)
        request.network = network
        request.harmlessToRepeat = true
        request.parentRoute = route
        // A token service that accepts and never answers must not hold its credential (and every request
        // waiting on it) forever.
        request.totalTimeoutSeconds = timeoutSeconds
        let t = CurlTransfer(
            multi: multi,
            request: request,
            destination: destination, delegate: self)
        transfer = t
        t.start()
    }

    func transferDidReceiveHeaderLine(_ raw: UnsafeRawBufferPointer) {
        let line = String(decoding: raw, as: UTF8.self).trimmingHTTPWhitespace().trimmingCRLF()
        if line.hasPrefix("HTTP/") {
            capture?.responseBegan()
            let parts = line.split(separator: " ")
            status = parts.count > 1 ? Int(parts[1]) ?? 0 : 0
            contentType = nil
            headers = []
        } else if let colon = line.firstIndex(of: ":") {
            let name = line[..<colon]
            let value = String(line[line.index(after: colon)...].trimmingHTTPWhitespace())
            if name.caseInsensitiveEquals("content-type") { contentType = value }
            headers.append((String(name), value))
        }
    }

    func transferDidReceiveBody(_ bytes: UnsafeRawBufferPointer) -> BodyAcceptance {
        if let limit = bodyLimit, body.count + bytes.count > limit {
            body.append(contentsOf: bytes.prefix(limit - body.count))
            truncated = true
            return .abort
        }
        guard body.count + bytes.count <= Self.maxBody else { return .abort }
        body.append(contentsOf: bytes)
        return .accepted
    }

    func transferNeedsBody(_ buffer: UnsafeMutableRawBufferPointer) -> BodySupply {
        form.supply(buffer)
    }

    func transferRewindBody() -> Bool {
        form.rewind()
        return true
    }

    func transferDidFinish(error: UpstreamError?) {
        let done0 = completion
        let traceContext = traceContext
        let done: ((Result<Response, FetchError>) -> Void)? = done0.map { d in
            { r in
                if let traceContext { InstrumentationContext.withValue(traceContext) { d(r) } } else { d(r) }
            }
        }
        completion = nil
        transfer = nil
        if let c = capture {
            capture = nil
            let failed = error != nil && !(truncated && error?.cause == .clientGone)
            c.finish(
                status: failed ? 0 : status, headers: headers, body: body,
                failure: failed ? error.map { $0.detail.isEmpty ? $0.response.message : $0.detail } : nil)
        }
        if let error, !(truncated && error.cause == .clientGone) {
            done?(
                .failure(
                    FetchError(
                        message: error.detail.isEmpty
                            ? error.response.message : "\(error.response.message): \(error.detail)",
                        failure: error.cause)))
        } else {
            done?(.success(Response(status: status, contentType: contentType, body: body, headers: headers)))
        }
        keepAlive = nil
    }
}

extension Substring {
    func trimmingCRLF() -> Substring {
        var s = self
        while let c = s.last, c == "\r" || c == "\n" || c == "\r\n" { s.removeLast() }
        return s
    }
}
