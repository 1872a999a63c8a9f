/// An error the proxy itself answers with, shaped like an ArcGIS REST error so GIS clients show the message:
/// `{"error":{"code":502,"message":"…","details":["…"]}}`. Messages name hosts and causes, never secrets.
public struct ErrorResponse: Error, Sendable, Equatable {
    public var status: Int
    public var message: String
    public var details: [String]
    /// Seconds for a `Retry-After` field (a temporary condition of the proxy itself), nil for none.
    public var retryAfter: Int?

    public init(status: Int, message: String, details: [String] = [], retryAfter: Int? = nil) {
        self.status = status
        self.message = message
        self.details = details
        self.retryAfter = retryAfter
    }

    public var jsonBody: String {
        let d = details.map { "\"\(jsonEscaped($0))\"" }.joined(separator: ",")
        return "{\"error\":{\"code\":\(status),\"message\":\"\(jsonEscaped(message))\",\"details\":[\(d)]}}"
    }

    public static func forParseError(_ e: HTTPParseError) -> ErrorResponse {
        ErrorResponse(status: e.status, message: "Bad request: \(e.message)")
    }
}

/// Escapes a string for inclusion in a JSON string literal.
public func jsonEscaped(_ s: String) -> String {
    var out = ""
    out.reserveCapacity(s.utf8.count)
    for scalar in s.unicodeScalars {
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        case "\r": out += "\\r"
        case "\t": out += "\\t"
        case _ where scalar.value < 0x20:
            let hex = String(scalar.value, radix: 16)
            out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
        default: out.unicodeScalars.append(scalar)
        }
    }
    return out
}

/// Standard reason phrases for the statuses the proxy produces itself.
func reasonPhrase(_ status: Int) -> String {
    switch status {
    case 100: return "Continue"
    case 200: return "OK"
    case 204: return "No Content"
    case 400: return "Bad Request"
    case 403: return "Forbidden"
    case 404: return "Not Found"
    case 405: return "Method Not Allowed"
    case 407: return "Proxy Authentication Required"
    case 408: return "Request Timeout"
    case 413: return "Content Too Large"
    case 414: return "URI Too Long"
    case 417: return "Expectation Failed"
    case 429: return "Too Many Requests"
    case 431: return "Request Header Fields Too Large"
    case 500: return "Internal Server Error"
    case 501: return "Not Implemented"
    case 502: return "Bad Gateway"
    case 503: return "Service Unavailable"
    case 504: return "Gateway Timeout"
    case 505: return "HTTP Version Not Supported"
    default: return "Status \(status)"
    }
}
