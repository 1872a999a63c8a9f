/// An AWS access key: static from the configuration, or temporary from STS (then with a session token).
struct AWSCredentials: Sendable, Equatable {
    var accessKeyID: String
    var secretAccessKey: String
    var sessionToken: String?

    /// The values that must never reach a client (the access key id identifies, it does not authenticate).
    var secrets: [String] { [secretAccessKey] + (sessionToken.map { [$0] } ?? []) }

    /// Temporary credentials as the value of an ``IssuedToken``: the token cache, the state file and the fleet store
    /// hold them like any token, and they must stay visible ASCII there (``TokenSyntax/arcgisProblem(_:)``), so each
    /// part is base64url-encoded and the parts are joined with `.` (base64url never contains one).
    var tokenValue: String {
        [
            Self.tokenPrefix, Base64URL.encode(accessKeyID), Base64URL.encode(secretAccessKey),
            Base64URL.encode(sessionToken ?? ""),
        ].joined(separator: ".")
    }

    static let tokenPrefix = "aws1"

    /// The inverse of ``tokenValue``; nil for anything else (a token of another shape in a stale store).
    init?(tokenValue: String) {
        let parts = tokenValue.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == Self.tokenPrefix,
            let id = Base64URL.decode(parts[1]), let secret = Base64URL.decode(parts[2]),
            let session = Base64URL.decode(parts[3]), !id.isEmpty, !secret.isEmpty
        else { return nil }
        accessKeyID = String(decoding: id, as: UTF8.self)
        secretAccessKey = String(decoding: secret, as: UTF8.self)
        sessionToken = session.isEmpty ? nil : String(decoding: session, as: UTF8.self)
    }

    init(accessKeyID: String, secretAccessKey: String, sessionToken: String?) {
        self.accessKeyID = accessKeyID
        self.secretAccessKey = secretAccessKey
        self.sessionToken = sessionToken
    }
}
