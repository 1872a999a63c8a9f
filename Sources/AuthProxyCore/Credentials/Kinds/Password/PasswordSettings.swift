/// HTTP authentication schemes a `password` credential may use.
public enum PasswordScheme: String, Sendable, CaseIterable {
    case basic, digest, ntlm
}

public struct PasswordSettings: Sendable, Equatable {
    public var username: String { didSet { encodeBasic() } }
    public var password: String { didSet { encodeBasic() } }
    /// NTLM domain: the user is sent as `DOMAIN\user`.
    public var domain: String? { didSet { encodeBasic() } }
    public var schemes: Set<PasswordScheme>
    /// Basic sends the password in clear: only over https unless this is set.
    public var allowBasicOverHTTP: Bool
    /// `user:password` in base64, and the `Authorization` value made of it: encoded once, when the credential
    /// loads, because the request head and the response's secret masking both want them for every request.
    /// Never logged.
    public private(set) var basicCredentials = ""
    private var basicValue = ""

    public init(
        username: String, password: String, domain: String?, schemes: Set<PasswordScheme>, allowBasicOverHTTP: Bool
    ) {
        self.username = username
        self.password = password
        self.domain = domain
        self.schemes = schemes
        self.allowBasicOverHTTP = allowBasicOverHTTP
        encodeBasic()
    }

    private mutating func encodeBasic() {
        basicCredentials = OAuth2TokenRequest.base64(Array("\(curlUser):\(password)".utf8))
        basicValue = "Basic " + basicCredentials
    }

    /// The user name as libcurl should send it.
    public var curlUser: String { domain.map { "\($0)\\\(username)" } ?? username }

    /// Basic alone: sent before any challenge, once per request, on any connection (``basicAuthorization(overHTTPS:)``).
    /// Digest takes a challenge round, answered by whichever client carries the request (the own HTTP/1.1 client's
    /// ``DigestLogin``); only NTLM binds to a connection and keeps a credential with libcurl (``bindsToConnection``).
    public var isBasicOnly: Bool { schemes.count == 1 && schemes.contains(.basic) }

    /// NTLM may answer: its handshake binds to libcurl's connection, so libcurl carries the request.
    public var bindsToConnection: Bool { schemes.contains(.ntlm) }

    /// The `Authorization` value for Basic (`user:password` in UTF-8, the user as ``curlUser``), when Basic may be
    /// sent: over https, or over http with `allow_basic_over_http`; nil otherwise, as libcurl would send nothing.
    public func basicAuthorization(overHTTPS: Bool) -> String? {
        guard schemes.contains(.basic), overHTTPS || allowBasicOverHTTP else { return nil }
        return basicValue
    }

    /// What a response may echo of the Basic login the proxy sent (``basicCredentials``), masked like a token: nil
    /// unless this is a Basic-only login that was sent.
    public func sentBasicCredentials(overHTTPS: Bool) -> String? {
        guard isBasicOnly, overHTTPS || allowBasicOverHTTP else { return nil }
        return basicCredentials
    }

    /// Why a 401 whose challenges offered `offered` (scheme names, any case) was not answered with this
    /// credential, when the cause is its settings rather than a wrong password: nil when it could answer.
    public func unanswerable(offered: [String], overHTTPS: Bool) -> String? {
        let schemesOffered = Set(offered.map { $0.lowercased() })
        var usable = schemes
        if !overHTTPS && !allowBasicOverHTTP { usable.remove(.basic) }
        guard !schemesOffered.isEmpty,
            !schemesOffered.contains(where: { PasswordScheme(rawValue: $0).map(usable.contains) ?? false })
        else { return nil }
        if schemesOffered.contains("basic"), schemes.contains(.basic), !overHTTPS, !allowBasicOverHTTP {
            return "the server offers Basic, which is not sent over http (it carries the password in clear) "
                + "unless the credential sets allow_basic_over_http = true; or use https"
        }
        let allowed = schemes.map(\.rawValue).sorted().joined(separator: ", ")
        return
            "the server offers \(schemesOffered.sorted().joined(separator: ", ")); the credential's schemes are \(allowed)"
    }
}
