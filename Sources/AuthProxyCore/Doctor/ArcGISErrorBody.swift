import Foundation

/// An ArcGIS error answer to the probed URL, and what it means for the operator.
///
/// ArcGIS says "token required" and "invalid token" mostly with HTTP 200 and a JSON body (or JSONP, or an
/// HTML page on tile endpoints), sometimes with HTTP 498/499; 403 with `GWM_0003` means the user (or the
/// anonymous caller) lacks permission. Which answers count is ``TokenRejection``'s rule, the same one the proxy
/// applies; this type adds the message and the explanation.
struct ArcGISErrorBody: Sendable, Equatable {
    enum Meaning: Sendable, Equatable {
        /// 499 or `GWM_0003` (not with 403): the resource is secured with ArcGIS tokens and none was sent.
        case tokenRequired
        /// 498: a token was sent and refused (expired, revoked, for another server, wrong referer).
        case invalidToken
        /// 403: signed in or not, this identity may not use the resource.
        case noPermission
        /// Any other ArcGIS error object (400 "Invalid URL", 404 "Service not found", 500 …).
        case other
    }

    var meaning: Meaning
    var code: Int?
    var messageCode: String?
    var message: String?
    var details: [String]

    /// Reads the answer; nil when it is not an ArcGIS error.
    static func read(status: Int, contentType: String?, body: [UInt8]) -> ArcGISErrorBody? {
        let head = Array(body.prefix(TokenRejection.lookAhead))
        let fields = TokenRejection.errorObject(head)
        let refusal = fields == nil ? nil : decodeRefusal(head)
        if status == 403, fields?.isTokenError == true || fields?.code == 403 {
            return ArcGISErrorBody(meaning: .noPermission, refusal)
        }
        if TokenRejection.isRejection(status: status, contentType: contentType, body: head) {
            let code = fields?.code ?? (status == 498 || status == 499 ? status : nil)
            var meaning: Meaning = code == 498 ? .invalidToken : .tokenRequired
            if fields == nil, status != 498, status != 499 {
                // The HTML page of tile endpoints says which.
                meaning =
                    String(decoding: head, as: UTF8.self).lowercased().contains("invalid token")
                    ? .invalidToken : .tokenRequired
            }
            var e = ArcGISErrorBody(meaning: meaning, refusal)
            if e.code == nil { e.code = code ?? (meaning == .invalidToken ? 498 : 499) }
            return e
        }
        guard let fields else { return nil }
        var e = ArcGISErrorBody(meaning: fields.code == 403 ? .noPermission : .other, refusal)
        if e.code == nil { e.code = fields.code }
        return e
    }

    private init(meaning: Meaning, _ refusal: TokenServiceRefusal?) {
        self.meaning = meaning
        code = refusal?.code
        messageCode = refusal?.messageCode
        message = refusal?.messageMember
        details = refusal?.details ?? []
    }

    init(meaning: Meaning, code: Int?, messageCode: String? = nil, message: String? = nil, details: [String] = []) {
        self.meaning = meaning
        self.code = code
        self.messageCode = messageCode
        self.message = message
        self.details = details
    }

    /// The error member (or the unwrapped object), JSONP wrapper removed.
    private static func decodeRefusal(_ body: [UInt8]) -> TokenServiceRefusal? {
        guard let open = body.firstIndex(of: UInt8(ascii: "{")), let close = body.lastIndex(of: UInt8(ascii: "}")),
            open < close
        else { return nil }
        let json = Data(body[open...close])
        if let e = try? JSONDecoder().decode(ErrorMemberResponse.self, from: json), let r = e.error { return r }
        if let r = try? JSONDecoder().decode(UnwrappedError.self, from: json) { return r.refusal }
        return nil
    }

    /// What it means, in a sentence the summary prints.
    var explanation: String {
        switch meaning {
        case .tokenRequired:
            return "the resource is secured with ArcGIS tokens and the request carried none"
        case .invalidToken:
            return "a token was sent and refused (expired, revoked, issued for another server or referer)"
        case .noPermission:
            return "no permission: the caller may not use this resource; a token helps only for a user who has access"
        case .other:
            return "an ArcGIS error that is not about authentication"
        }
    }

    /// `499 Token Required (GWM_0003)`, for the summary.
    var label: String {
        var parts: [String] = []
        if let code { parts.append(String(code)) }
        if let message { parts.append("\"\(message)\"") }
        var s = parts.isEmpty ? "error" : parts.joined(separator: " ")
        if let messageCode { s += " (\(messageCode))" }
        return s
    }
}

/// `{"code":499,"message":…}` without the `error` wrapper (ArcGIS Server and older releases).
private struct UnwrappedError: Decodable {
    var refusal: TokenServiceRefusal
    init(from decoder: any Decoder) throws { refusal = TokenServiceRefusal(from: decoder) }
}
