import Foundation

/// Builds a capture's HAR entries from what the proxy knows of a request: the client's request, what went
/// upstream, the secrets it put there, and the answer. Redaction happens here, field by field, from that knowledge
/// (``CaptureRedaction``); the recorder only ever holds the result. Pure: no clock, no I/O.
enum CaptureEntryBuilder {
    /// The most body bytes an entry keeps (request or response).
    static let bodyCap = 64 * 1024

    /// A body as collected: its first bytes (up to ``bodyCap`` plus the longest secret, so a secret that straddles
    /// the cap is still replaced whole before the cut), and how many bytes there were in all.
    struct Body: Equatable {
        var bytes: [UInt8] = []
        var total = 0

        /// Keeps at most `limit` bytes, counting every byte.
        mutating func append(_ more: UnsafeRawBufferPointer, limit: Int) {
            total += more.count
            let room = limit - bytes.count
            if room > 0 { bytes.append(contentsOf: more.prefix(room)) }
        }
    }

    /// A request's parts, as sent by the client or as sent upstream. `form`: the urlencoded body when the proxy held
    /// it whole; `bodyLength`: nil none, -1 chunked.
    struct RequestParts {
        var method: String
        var url: String
        var headers: [(name: String, value: String)]
        var form: [UInt8]? = nil
        var bodyLength: Int64? = nil
    }

    // MARK: - a client's exchange

    /// The client's request as it arrived: its own secrets (`Authorization`, `Proxy-Authorization`, cookies,
    /// fields named like `token`) replaced.
    static func clientRequest(_ r: RequestParts) -> HAR.Request {
        let (url, query) = CaptureRedaction.redactedURL(r.url, clientURL: nil, credential: nil)
        return HAR.Request(
            method: r.method, url: url, httpVersion: "HTTP/1.1",
            cookies: CaptureRedaction.cookies(r.headers, response: false),
            headers: CaptureRedaction.clientHeaders(r.headers), queryString: query,
            postData: postData(r, client: nil, credential: nil), bodySize: bodySize(r))
    }

    /// The request as it went upstream: whatever the proxy added to the client's (fields, query parameters, form
    /// fields) is the credential's and replaced by its marker; the client's own secrets as in ``clientRequest(_:)``.
    static func upstreamRequest(_ r: RequestParts, client: RequestParts, credential: String) -> HAR.Request {
        let (url, query) = CaptureRedaction.redactedURL(r.url, clientURL: client.url, credential: credential)
        return HAR.Request(
            method: r.method, url: url, httpVersion: "HTTP/1.1",
            cookies: CaptureRedaction.cookies(r.headers, response: false),
            headers: CaptureRedaction.upstreamHeaders(r.headers, client: client.headers, credential: credential),
            queryString: query, postData: postData(r, client: client, credential: credential), bodySize: bodySize(r))
    }

    private static func bodySize(_ r: RequestParts) -> Int {
        if let f = r.form { return f.count }
        guard let n = r.bodyLength else { return 0 }
        return n < 0 ? -1 : Int(n)
    }

    /// A held urlencoded form, redacted pair by pair (against the client's form, or its query for a GET sent as a
    /// form); a streamed body is not recorded (the proxy never holds it whole), which the entry says.
    private static func postData(_ r: RequestParts, client: RequestParts?, credential: String?) -> HAR.PostData? {
        let type = r.headers.first { $0.name.lowercased() == "content-type" }?.value ?? ""
        guard let form = r.form else {
            guard let n = r.bodyLength, n != 0 else { return nil }
            return HAR.PostData(
                mimeType: type, params: nil, text: "",
                comment: "body streamed through the proxy: not recorded (\(n < 0 ? "chunked" : "\(n) bytes"))")
        }
        var clientPairs: Substring? = nil
        if let client {
            if let f = client.form {
                clientPairs = Substring(String(decoding: f, as: UTF8.self))
            } else if let q = client.url.firstIndex(of: "?") {
                clientPairs = client.url[client.url.index(after: q)...]
            } else {
                clientPairs = ""
            }
        }
        let text = String(decoding: form.prefix(bodyCap), as: UTF8.self)
        let pairs = CaptureRedaction.redactedPairs(Substring(text), client: clientPairs, credential: credential)
        return HAR.PostData(
            mimeType: type, params: pairs.list, text: pairs.raw,
            comment: form.count > bodyCap ? "first \(bodyCap) of \(form.count) bytes" : nil)
    }

    /// The upstream's answer: cookies replaced, and every secret the proxy put on the request replaced wherever the
    /// answer echoes it (fields, body). A compressed body is not recorded (it cannot be read for those secrets); a
    /// body past ``bodyCap`` is cut there, which the content's comment says.
    static func response(
        status: Int, headers: [(name: String, value: String)], body: Body?, secrets: [String], credential: String
    ) -> HAR.Response {
        func field(_ n: String) -> String? { headers.first { $0.name.lowercased() == n }?.value }
        let type = field("content-type") ?? ""
        var content = HAR.Content(size: body?.total ?? 0, mimeType: type)
        if let body, body.total > 0 {
            if let coding = field("content-encoding"), coding.lowercased() != "identity" {
                content.comment = "body in Content-Encoding \(coding): not recorded"
            } else {
                var bytes = CaptureRedaction.replacingKnown(body.bytes, secrets: secrets, credential: credential)
                if bytes.count > bodyCap || body.total > body.bytes.count {
                    bytes = Array(bytes.prefix(bodyCap))
                    content.comment = "first \(bytes.count) of \(body.total) bytes recorded"
                }
                setText(&content, bytes)
            }
        }
        let location = field("location").map {
            CaptureRedaction.replacingKnown($0, secrets: secrets, credential: credential)
        }
        return HAR.Response(
            status: status, statusText: reasonPhrase(status), httpVersion: "HTTP/1.1",
            cookies: CaptureRedaction.cookies(headers, response: true),
            headers: CaptureRedaction.responseHeaders(headers, secrets: secrets, credential: credential),
            content: content, redirectURL: location ?? "", bodySize: body?.total ?? 0)
    }

    /// No answer came (the upstream failed, the client left): HAR still wants a response; status 0 as browsers
    /// record a failed request, with the reason.
    static func noResponse(_ why: String) -> HAR.Response {
        HAR.Response(
            status: 0, statusText: "", httpVersion: "HTTP/1.1", cookies: [], headers: [],
            content: HAR.Content(size: 0, mimeType: ""), redirectURL: "", bodySize: 0, comment: why)
    }

    private static func setText(_ content: inout HAR.Content, _ bytes: [UInt8]) {
        if let s = String(validating: bytes, as: UTF8.self) {
            content.text = s
        } else {
            content.text = Data(bytes).base64EncodedString()
            content.encoding = "base64"
        }
    }

    // MARK: - the proxy's own token requests

    /// A request to a token service: only the fields that say which grant and service are kept
    /// (``CaptureRedaction/tokenServiceFields``); a password, client secret, assertion, refresh or portal token and
    /// every field a gateway added are replaced.
    static func tokenServiceRequest(
        method: String, url: String, headers: [(name: String, value: String)], form: [UInt8]?, credential: String
    ) -> HAR.Request {
        let keep = CaptureRedaction.tokenServiceFields
        let (shown, query) = CaptureRedaction.redactedURL(url, clientURL: nil, credential: credential, keep: keep)
        var post: HAR.PostData? = nil
        var size = 0
        if let form {
            let encoded = String(decoding: form, as: UTF8.self)
            size = form.count
            let r = CaptureRedaction.redactedPairs(Substring(encoded), client: nil, credential: credential, keep: keep)
            post = HAR.PostData(mimeType: "application/x-www-form-urlencoded", params: r.list, text: r.raw)
        }
        return HAR.Request(
            method: method, url: shown, httpVersion: "HTTP/1.1", cookies: [],
            headers: CaptureRedaction.upstreamHeaders(headers, client: [], credential: credential),
            queryString: query, postData: post, bodySize: size)
    }

    /// A token service's answer: a JSON body with every secret-named member (``CaptureRedaction/secretNames``,
    /// at any depth) replaced; a body that is not JSON is not recorded (nothing says where a token would be in it).
    static func tokenServiceResponse(
        status: Int, headers: [(name: String, value: String)], body: [UInt8], credential: String
    )
        -> HAR.Response
    {
        let type = headers.first { $0.name.lowercased() == "content-type" }?.value ?? ""
        var content = HAR.Content(size: body.count, mimeType: type)
        if !body.isEmpty {
            if let json = redactedJSON(body, credential: credential) {
                setText(&content, Array(json.prefix(bodyCap)))
                if json.count > bodyCap { content.comment = "first \(bodyCap) bytes of the redacted JSON recorded" }
            } else {
                content.comment = "token service answer that is not JSON: not recorded"
            }
        }
        return HAR.Response(
            status: status, statusText: reasonPhrase(status), httpVersion: "HTTP/1.1",
            cookies: CaptureRedaction.cookies(headers, response: true),
            headers: CaptureRedaction.responseHeaders(headers, secrets: [], credential: credential),
            content: content, redirectURL: "", bodySize: body.count)
    }

    /// `body` parsed as JSON with every member named in ``CaptureRedaction/secretNames`` replaced by the marker,
    /// serialised again; nil when it is not JSON.
    static func redactedJSON(_ body: [UInt8], credential: String) -> [UInt8]? {
        guard let value = try? JSONSerialization.jsonObject(with: Data(body), options: [.fragmentsAllowed]) else {
            return nil
        }
        let marker = CaptureRedaction.marker(credential: credential)
        func walk(_ v: Any) -> Any {
            if let o = v as? [String: Any] {
                var out: [String: Any] = [:]
                for (k, x) in o {
                    out[k] = CaptureRedaction.secretNames.contains(k.lowercased()) ? marker : walk(x)
                }
                return out
            }
            if let a = v as? [Any] { return a.map(walk) }
            return v
        }
        guard
            let data = try? JSONSerialization.data(
                withJSONObject: walk(value), options: [.fragmentsAllowed, .sortedKeys, .withoutEscapingSlashes])
        else { return nil }
        return Array(data)
    }
}
