/// One header field a `header` credential sets.
public struct HeaderField: Sendable, Equatable {
    public var name: String
    public var value: String

    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }

    /// Fields the proxy owns (framing, routing, hop-by-hop) or that would change what the request is: never set
    /// by a credential.
    static let refused: Set<String> = [
        "host", "content-length", "transfer-encoding", "connection", "keep-alive",
        "proxy-connection", "proxy-authorization", "proxy-authenticate", "te", "trailer", "upgrade", "expect", "via",
    ]

    /// Why `name` cannot be set by a credential, nil when it can: an RFC 9110 token not in ``refused``.
    static func problem(name: String) -> String? {
        let tchar = Set("!#$%&'*+-.^_`|~".utf8)
        guard !name.isEmpty,
            name.utf8.allSatisfy({
                ($0 >= 48 && $0 <= 57) || ($0 | 0x20 >= 97 && $0 | 0x20 <= 122) || tchar.contains($0)
            })
        else { return "is not a header field name" }
        if refused.contains(name.lowercased()) { return "is a field the proxy itself manages" }
        return nil
    }
}
