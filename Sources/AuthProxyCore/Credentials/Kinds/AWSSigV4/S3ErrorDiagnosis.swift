/// What an S3 (or other SigV4 service's) refusal says about the signing credential, for the log: S3 gives the
/// reason only in a small XML body (`<Error><Code>SignatureDoesNotMatch</Code>…`), never in the head. Pure.
struct S3ErrorDiagnosis: Equatable {
    /// The refusal means the credential's temporary credentials are no longer good (expired or revoked): new ones
    /// from STS may help.
    var credentialsExpired: Bool
    /// The log line (nothing secret: the error code, and for a clock error the times the server sent).
    var message: String

    /// How much of an error body is read at most (S3's are under 2 KiB).
    static let bodyLimit = 16 * 1024

    /// Whether a response with this status may be a refusal worth reading: 400 and 403 only, so a success costs
    /// nothing.
    static func worthReading(status: Int) -> Bool { status == 403 || status == 400 }

    /// The diagnosis of a refusal body, or nil when it is not one about the signature or the keys (an
    /// `AccessDenied` by policy, `NoSuchKey`, anything not an S3 error).
    /// `requestTime`: when the proxy signed (milliseconds since the epoch), for the clock offset when the body has
    /// no `RequestTime`.
    static func diagnose(
        status: Int, body: some Collection<UInt8>, credential: String, temporary: Bool, requestTime: Int64?
    ) -> S3ErrorDiagnosis? {
        guard worthReading(status: status) else { return nil }
        let text = String(decoding: body.prefix(bodyLimit), as: UTF8.self)
        guard text.contains("<Error"), let code = AWSXML.text(of: "Code", in: text) else { return nil }
        let who = "credential '\(credential)'"
        switch code {
        case "SignatureDoesNotMatch":
            return S3ErrorDiagnosis(
                credentialsExpired: false,
                message:
                    "\(who): the server computed another signature (HTTP \(status) SignatureDoesNotMatch): secret_access_key does not belong to access_key_id, or something between the proxy and the server changed the request (the path, the Host or a signed header)"
            )
        case "RequestTimeTooSkewed":
            return S3ErrorDiagnosis(
                credentialsExpired: false, message: "\(who): " + skewExplanation(text, requestTime: requestTime))
        case "InvalidAccessKeyId":
            return S3ErrorDiagnosis(
                credentialsExpired: temporary,
                message:
                    "\(who): the server does not know the access key id (HTTP \(status) InvalidAccessKeyId)\(temporary ? "; asking STS for new credentials" : ": check access_key_id and that the key is active")"
            )
        case "ExpiredToken", "InvalidToken", "TokenRefreshRequired":
            return S3ErrorDiagnosis(
                credentialsExpired: temporary,
                message:
                    "\(who): the server refuses the session token (HTTP \(status) \(code))\(temporary ? "; asking STS for new credentials" : ": session_token has expired or does not belong to the access key; put new temporary credentials in the configuration")"
            )
        default:
            return nil
        }
    }

    /// "the proxy's clock is N s behind the server's" from `ServerTime` and `RequestTime` (S3 sends both; the
    /// request time is the proxy's own clock when it signed).
    static func skewExplanation(_ text: String, requestTime: Int64?) -> String {
        let base =
            "the server refuses the signature's time (RequestTimeTooSkewed): the signature is dated by this host's clock, which is off"
        let server = AWSXML.text(of: "ServerTime", in: text).flatMap(parseTime)
        let request = AWSXML.text(of: "RequestTime", in: text).flatMap(parseTime) ?? requestTime
        let allowed = AWSXML.text(of: "MaxAllowedSkewMilliseconds", in: text).flatMap { Int64($0) }
        let allowance = allowed.map { " (the server allows \($0 / 1000) s)" } ?? ""
        guard let server, let request else {
            return base + allowance + "; set the clock right (NTP)"
        }
        let offset = (request - server) / 1000
        let direction = offset >= 0 ? "ahead of" : "behind"
        return base
            + " by about \(abs(offset)) s: it is \(direction) the server's\(allowance); set the clock right (NTP)"
    }

    /// `2026-11-28T12:00:00Z` (ServerTime), `20261128T120000Z` (an X-Amz-Date) or an HTTP date
    /// (`Sat, 28 Nov 2026 12:00:00 GMT`, which S3 uses for `RequestTime` of requests signed with `Date`).
    static func parseTime(_ s: String) -> Int64? {
        let t = String(s.trimmingWhitespace())
        if let v = parseRFC3339(t) { return v }
        let u = Array(t.utf8)
        if u.count == 16, u[8] == UInt8(ascii: "T"), u[15] == UInt8(ascii: "Z") {
            let iso =
                "\(t.prefix(4))-\(t.dropFirst(4).prefix(2))-\(t.dropFirst(6).prefix(2))T\(t.dropFirst(9).prefix(2)):\(t.dropFirst(11).prefix(2)):\(t.dropFirst(13).prefix(2))Z"
            return parseRFC3339(iso)
        }
        return ServerClock.parseHTTPDate(t)
    }
}
