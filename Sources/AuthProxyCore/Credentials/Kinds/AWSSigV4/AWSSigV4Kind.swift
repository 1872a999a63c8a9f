/// `type = "aws-sigv4"`: signs every matched request with AWS Signature Version 4 (S3 and S3-compatible object
/// stores holding COGs, PMTiles and GeoParquet; any SigV4 service), with a static access key or with temporary
/// credentials from STS `AssumeRoleWithWebIdentity` (docs/credentials-cloud.md).
///
/// The signature covers the request exactly as it goes upstream: method, path, query, `Host` and the signed fields.
/// A GET or HEAD (and any S3 request whose body streams) is signed with `UNSIGNED-PAYLOAD`, so range requests and
/// large transfers stream; a body of known length up to ``maxSignedBodyBytes`` is held and its SHA-256 signed.
public struct AWSSigV4Kind: CredentialKind, Equatable {
    public static let typeName = "aws-sigv4"
    public static var fetchesTokens: Bool { true }
    public static var secretKeys: Set<String> { ["secret_access_key", "session_token"] }

    /// Where the keys come from.
    enum Keys: Sendable, Equatable {
        /// `access_key_id` + `secret_access_key` (+ `session_token`) from the configuration.
        case fixed(AWSCredentials)
        /// Temporary credentials from STS, exchanged for the web identity token (the token service's "token").
        case webIdentity(STSWebIdentity)
    }

    /// The credential's name (for messages the kind writes itself).
    var name: String
    var region: String
    var service: String
    var keys: Keys
    /// A body of known length up to this is held and its hash signed; a longer or chunked one streams unsigned
    /// (S3) or is refused (services that need the payload hash).
    var maxSignedBodyBytes: Int

    static let defaultMaxSignedBodyBytes = 8 * 1024 * 1024

    /// S3 takes `UNSIGNED-PAYLOAD` and wants `X-Amz-Content-SHA256` on every request; other services need the
    /// body's hash and do not look for that field.
    var isS3: Bool { service == "s3" }

    public var role: CredentialRole { .token }

    public var tokenSource: TokenSource {
        if case .webIdentity = keys { return .fetched }
        return .none
    }

    public var identityMaterial: String {
        var parts = ["aws-sigv4", region, service, String(maxSignedBodyBytes)]
        switch keys {
        case .fixed(let k):
            parts += ["keys", k.accessKeyID, k.secretAccessKey, k.sessionToken ?? ""]
        case .webIdentity(let w):
            parts += [
                "web-identity", w.roleARN, w.tokenFile, w.sessionName, w.endpoint,
                w.durationSeconds.map(String.init) ?? "",
            ]
        }
        return parts.joined(separator: "\u{0}")
    }

    public func prepare(_ request: RequestView) -> Preparation {
        if Self.isPresigned(request.target.pathAndQuery) { return Preparation(clientHasOwn: true) }
        if let n = request.bodyLength, n > 0, n <= Int64(maxSignedBodyBytes) {
            return Preparation(holdsBodyUpTo: maxSignedBodyBytes)
        }
        return Preparation()
    }

    public func apply(_ token: IssuedToken?, to request: inout OutgoingRequest) -> ApplyFailure? {
        let credentials: AWSCredentials
        switch keys {
        case .fixed(let k):
            credentials = k
        case .webIdentity:
            guard let value = token?.value, let k = AWSCredentials(tokenValue: value) else {
                return ApplyFailure(
                    message: "Credential '\(request.credential)': no temporary AWS credentials to sign the request with"
                )
            }
            credentials = k
        }
        return sign(&request, with: credentials)
    }

    /// S3 answers a bad signature, a wrong clock or expired temporary credentials only in its body: 400 and 403 are
    /// read (bounded, ``S3ErrorDiagnosis/bodyLimit``) and everything else passes untouched.
    public func rejection(of head: ResponseView) -> Rejection {
        S3ErrorDiagnosis.worthReading(status: head.status) ? .readBody : .none
    }

    /// The reading of a 400/403 body ``rejection(of:)`` asked for: rejected when new temporary credentials may
    /// help, and the log line naming the credential and the cause, if the body says one.
    public func rejection(of head: ResponseView, body: [UInt8]) -> BodyVerdict {
        reading(of: head, body: body, now: nowMillis())
    }

    /// ``rejection(of:body:)`` at `now` (when the request was signed, near enough, for the clock offset).
    func reading(of head: ResponseView, body: some Collection<UInt8>, now: Int64) -> BodyVerdict {
        var temporary = false
        if case .webIdentity = keys { temporary = true }
        guard
            let d = S3ErrorDiagnosis.diagnose(
                status: head.status, body: body, credential: name, temporary: temporary, requestTime: now)
        else { return BodyVerdict(rejected: false) }
        return BodyVerdict(rejected: d.credentialsExpired, note: d.message)
    }

    /// Static keys too: a refused signature is explained in the log, though there is nothing to refresh.
    public var inspectsResponses: Bool { true }

    /// The fields it sets: no other credential on the same request may set them.
    public var occupies: [String] { ["authorization", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token"] }

    /// 400/403 bodies are read (``rejection(of:)``).
    public var readsBodiesForRejection: Bool { true }

    public func secrets(token: IssuedToken?) -> [String] {
        switch keys {
        case .fixed(let k):
            return k.secrets
        case .webIdentity:
            return token.flatMap { AWSCredentials(tokenValue: $0.value) }?.secrets ?? []
        }
    }

    public var statusDetails: [(String, String)] {
        var rows = [("region", region), ("service", service)]
        switch keys {
        case .fixed(let k):
            rows.append(("keys", k.sessionToken == nil ? "access key" : "access key with session token"))
        case .webIdentity(let w):
            rows += [("keys", "web identity"), ("role_arn", w.roleARN), ("sts_endpoint", w.endpoint)]
        }
        rows.append(("max_signed_body_bytes", String(maxSignedBodyBytes)))
        return rows
    }

    /// A presigned URL (`X-Amz-Signature`, or the older `Signature` with `AWSAccessKeyId`) carries its own
    /// authorization: S3 refuses a request that has two, so such a request goes as the client made it.
    static func isPresigned(_ pathAndQuery: String) -> Bool {
        guard let q = pathAndQuery.firstIndex(of: "?") else { return false }
        var v2Signature = false
        var v2Key = false
        for item in pathAndQuery[pathAndQuery.index(after: q)...].split(separator: "&") {
            let name = item.prefix { $0 != "=" }
            if name == "X-Amz-Signature" || name == "X-Amz-Credential" { return true }
            if name == "Signature" { v2Signature = true }
            if name == "AWSAccessKeyId" { v2Key = true }
        }
        return v2Signature && v2Key
    }
}
