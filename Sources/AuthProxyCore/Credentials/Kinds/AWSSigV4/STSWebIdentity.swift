import Foundation

/// `AssumeRoleWithWebIdentity` at AWS STS: the request the proxy sends (an unsigned query-protocol POST: the web
/// identity token is the proof) and the reading of the answer. Pure.
struct STSWebIdentity: Sendable, Equatable {
    var roleARN: String
    /// Read at every exchange: Kubernetes and EKS rotate the projected service-account token under the proxy.
    var tokenFile: String
    var sessionName: String
    /// The STS endpoint URL.
    var endpoint: String
    /// `DurationSeconds`; nil: the role's default (one hour).
    var durationSeconds: Int?

    /// The regional STS endpoint for `region` (the global one is legacy and always in us-east-1).
    static func defaultEndpoint(region: String) -> String {
        region.hasPrefix("cn-") ? "https://sts.\(region).amazonaws.com.cn/" : "https://sts.\(region).amazonaws.com/"
    }

    /// A `RoleSessionName` made from a credential name: AWS allows `[\w+=,.@-]{2,64}`.
    static func sessionName(forCredential name: String) -> String {
        let cleaned = String(("authproxy-" + name).map { isSessionNameCharacter($0) ? $0 : "-" }.prefix(64))
        return cleaned
    }

    static func isSessionNameCharacter(_ c: Character) -> Bool {
        guard c.isASCII, let b = c.asciiValue else { return false }
        return SigV4Encoding.isUnreserved(b) && b != UInt8(ascii: "~") || "+=,@".contains(c)
    }

    static func isValidSessionName(_ s: String) -> Bool {
        (2...64).contains(s.count) && s.allSatisfy(isSessionNameCharacter)
    }

    /// The form fields of the request, with the token read from ``tokenFile``.
    func form(token: String) -> [(String, String)] {
        var f = [
            ("Action", "AssumeRoleWithWebIdentity"), ("Version", "2011-06-15"), ("RoleArn", roleARN),
            ("RoleSessionName", sessionName), ("WebIdentityToken", token),
        ]
        if let durationSeconds { f.append(("DurationSeconds", String(durationSeconds))) }
        return f
    }

    /// What an answer says.
    enum Answer: Equatable {
        /// Temporary credentials, valid until `expires` (milliseconds since the epoch).
        case credentials(AWSCredentials, expires: Int64)
        /// STS refused the exchange (an `ErrorResponse`): `code` and its message.
        case refused(code: String, message: String?)
        /// No answer to act on (a 5xx, throttling, a body that is not an STS answer): try again later.
        case outage(String)
    }

    /// Reads an answer: the XML STS documents, or the JSON it sends when the request accepts
    /// `application/json` (the proxy's own requests do), with `Expiration` as seconds since the epoch.
    static func classify(status: Int, body: [UInt8]) -> Answer {
        let text = String(decoding: body.prefix(64 * 1024), as: UTF8.self)
        let trimmed = text.drop { $0.isWhitespace }
        if trimmed.hasPrefix("{") { return classifyJSON(status: status, body: body) }
        if status == 200 {
            guard let id = AWSXML.text(of: "AccessKeyId", in: text), !id.isEmpty,
                let secret = AWSXML.text(of: "SecretAccessKey", in: text), !secret.isEmpty,
                let session = AWSXML.text(of: "SessionToken", in: text), !session.isEmpty,
                let expiration = AWSXML.text(of: "Expiration", in: text)
            else { return .outage("HTTP 200 without AccessKeyId, SecretAccessKey, SessionToken and Expiration") }
            guard let expires = parseRFC3339(expiration.trimmingWhitespace().description) else {
                return .outage("an Expiration that is not an ISO 8601 time")
            }
            return checked(AWSCredentials(accessKeyID: id, secretAccessKey: secret, sessionToken: session), expires)
        }
        if let code = AWSXML.text(of: "Code", in: text), !code.isEmpty {
            return refusalOrOutage(status: status, code: code, message: AWSXML.text(of: "Message", in: text))
        }
        return .outage("HTTP \(status)")
    }

    private static func classifyJSON(status: Int, body: [UInt8]) -> Answer {
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) else {
            return .outage("HTTP \(status) with a body that is not JSON")
        }
        if status == 200 {
            guard let c = find("Credentials", in: object) as? [String: Any],
                let id = c["AccessKeyId"] as? String, !id.isEmpty,
                let secret = c["SecretAccessKey"] as? String, !secret.isEmpty,
                let session = c["SessionToken"] as? String, !session.isEmpty
            else { return .outage("HTTP 200 without Credentials") }
            let expires: Int64
            if let n = c["Expiration"] as? NSNumber {
                expires = Int64(n.doubleValue * 1000)
            } else if let s = c["Expiration"] as? String, let t = parseRFC3339(s) {
                expires = t
            } else {
                return .outage("HTTP 200 without a readable Expiration")
            }
            return checked(AWSCredentials(accessKeyID: id, secretAccessKey: secret, sessionToken: session), expires)
        }
        if let e = find("Error", in: object) as? [String: Any], let code = e["Code"] as? String, !code.isEmpty {
            return refusalOrOutage(status: status, code: code, message: e["Message"] as? String)
        }
        return .outage("HTTP \(status)")
    }

    /// The first value named `key` in a JSON tree, depth first.
    private static func find(_ key: String, in object: Any) -> Any? {
        if let d = object as? [String: Any] {
            if let v = d[key] { return v }
            for v in d.values { if let found = find(key, in: v) { return found } }
        } else if let a = object as? [Any] {
            for v in a { if let found = find(key, in: v) { return found } }
        }
        return nil
    }

    /// Temporary credentials go into request heads: what could break a head is no answer.
    private static func checked(_ c: AWSCredentials, _ expires: Int64) -> Answer {
        for part in [c.accessKeyID, c.secretAccessKey, c.sessionToken ?? ""]
        where TokenSyntax.arcgisProblem(part) != nil {
            return .outage("credentials that are not visible ASCII")
        }
        return .credentials(c, expires: expires)
    }

    /// Throttling and STS's own trouble are outages (try again later); everything else refuses this exchange.
    private static func refusalOrOutage(status: Int, code: String, message: String?) -> Answer {
        let transient: Set<String> = [
            "Throttling", "ThrottlingException", "IDPCommunicationError", "ServiceUnavailable", "InternalFailure",
            "RequestLimitExceeded",
        ]
        if status >= 500 || status == 429 || transient.contains(code) {
            return .outage("HTTP \(status) \(code)\(message.map { ": \(shortened($0))" } ?? "")")
        }
        return .refused(code: code, message: message.map(shortened))
    }

    private static func shortened(_ s: String) -> String { s.count > 300 ? String(s.prefix(300)) + "…" : s }

    /// What to check for a refusal, beside STS's own words.
    static func advice(_ code: String) -> [String] {
        switch code {
        case "InvalidIdentityToken", "ExpiredTokenException":
            return [
                "STS does not accept the token in web_identity_token_file: check that the file is the current token and that the role trusts its issuer (the IAM OIDC provider) and audience."
            ]
        case "AccessDenied":
            return [
                "The role's trust policy does not allow sts:AssumeRoleWithWebIdentity for this token's subject: check role_arn and the trust policy's conditions."
            ]
        case "ValidationError", "InvalidParameterValue":
            return ["STS refuses a parameter: check role_arn, role_session_name and duration_seconds."]
        default:
            return []
        }
    }
}
