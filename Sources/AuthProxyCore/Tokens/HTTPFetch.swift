import Dispatch

/// A small request the proxy makes on its own behalf (token services, `rest/info`): the whole response is
/// collected (bounded to ``maxBody``). Runs on a ``CurlMulti``'s queue; keeps itself alive until done.
final class HTTPFetch: UpstreamTransferDelegate {
    struct Response: Sendable {
        var status: Int
        var contentType: String?
        var body: [UInt8]
    }

    static let maxBody = 1024 * 1024

    private let multi: CurlMulti
    private let method: String
    private let url: String
    private var form: [UInt8]
    private var sent = 0
    private let timeoutSeconds: Int
    private var status = 0
    private var contentType: String?
    private var body: [UInt8] = []
    private var transfer: UpstreamTransfer?
    private var completion: ((Result<Response, FetchError>) -> Void)?
    private var keepAlive: HTTPFetch?

    struct FetchError: Error, Sendable {
        let message: String
    }

    /// Server trust and network credentials for the request (token services behind an internal CA or IWA).
    private let network: NetworkAuth

    init(multi: CurlMulti, method: String, url: String, form: [(String, String)]?, timeoutSeconds: Int,
        network: NetworkAuth = NetworkAuth(), completion: @escaping (Result<Response, FetchError>) -> Void)
    {
        self.network = network
        self.multi = multi
        self.method = method
        self.url = url
        self.form = form.map { Array(TokenInjection.formEncoded($0).utf8) } ?? []
        self.timeoutSeconds = timeoutSeconds
        self.completion = completion
    }

    func start() {
        keepAlive = self
        var lines = ["Accept: application/json", "Expect:", "User-Agent: authproxy/\(AuthProxyVersion.string)"]
        if method == "POST" { lines.append("Content-Type: application/x-www-form-urlencoded") }
        let destination = HTTPURL.parse(url).map { "\($0.target.urlHost):\($0.target.port)" } ?? url
        var request = UpstreamRequest(method: method, url: url, headerLines: lines,
            bodyLength: method == "POST" ? Int64(form.count) : nil, timeoutSeconds: timeoutSeconds)
        request.network = network
        // A token service that accepts and never answers must not hold its credential (and every request
        // waiting on it) forever.
        request.totalTimeoutSeconds = timeoutSeconds
        let t = UpstreamTransfer(
            multi: multi,
            request: request,
            destination: destination, delegate: self)
        transfer = t
        t.start()
    }

    func transferDidReceiveHeaderLine(_ raw: UnsafeRawBufferPointer) {
        let line = String(decoding: raw, as: UTF8.self).trimmingHTTPWhitespace().trimmingCRLF()
        if line.hasPrefix("HTTP/") {
            let parts = line.split(separator: " ")
            status = parts.count > 1 ? Int(parts[1]) ?? 0 : 0
            contentType = nil
        } else if let colon = line.firstIndex(of: ":"), line[..<colon].caseInsensitiveEquals("content-type") {
            contentType = String(line[line.index(after: colon)...].trimmingHTTPWhitespace())
        }
    }

    func transferDidReceiveBody(_ bytes: UnsafeRawBufferPointer) -> BodyAcceptance {
        guard body.count + bytes.count <= Self.maxBody else { return .abort }
        body.append(contentsOf: bytes)
        return .accepted
    }

    func transferNeedsBody(_ buffer: UnsafeMutableRawBufferPointer) -> BodySupply {
        let n = min(buffer.count, form.count - sent)
        if n == 0 { return .end }
        form.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[sent..<(sent + n)])) }
        sent += n
        return .bytes(n)
    }

    func transferRewindBody() -> Bool {
        sent = 0
        return true
    }

    func transferDidFinish(error: UpstreamError?) {
        let done = completion
        completion = nil
        transfer = nil
        if let error {
            done?(.failure(FetchError(message: error.detail.isEmpty ? error.response.message : "\(error.response.message): \(error.detail)")))
        } else {
            done?(.success(Response(status: status, contentType: contentType, body: body)))
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
