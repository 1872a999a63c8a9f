/// One `[[app.user_rule]]`: users whose token's `claim` holds `value` get `credentials`. `claim` may be a dotted
/// path into nested objects (`realm_access.roles`, Keycloak's realm roles); the value found there matches when it
/// is the string `value`, an array holding it, or a boolean or number written the same way.
public struct UserRule: Sendable, Equatable {
    public var claim: String
    public var value: String
    public var credentials: [String]

    public init(claim: String, value: String, credentials: [String]) {
        self.claim = claim
        self.value = value
        self.credentials = credentials
    }

    /// Whether the (verified) claims match this rule.
    func matches(_ claims: [String: Any]) -> Bool {
        guard let found = Self.lookup(claim, in: claims) else { return false }
        if let list = found as? [Any] { return list.contains { Self.equals($0, value) } }
        return Self.equals(found, value)
    }

    /// The value at a dotted path. A claim whose own name has a dot (`https://example.com/roles`, as Auth0 names
    /// custom claims) is found whole first.
    static func lookup(_ path: String, in claims: [String: Any]) -> Any? {
        if let whole = claims[path] { return whole }
        var current: Any = claims
        for part in path.split(separator: ".", omittingEmptySubsequences: false) {
            guard let object = current as? [String: Any], let next = object[String(part)] else { return nil }
            current = next
        }
        return current
    }

    private static func equals(_ v: Any, _ expected: String) -> Bool {
        switch v {
        case let s as String: return s == expected
        case let b as Bool: return (b ? "true" : "false") == expected
        case let i as Int: return String(i) == expected
        default: return false
        }
    }

    /// The index of the first rule that matches, nil when none does.
    static func firstMatch(_ rules: [UserRule], _ claims: [String: Any]) -> Int? {
        rules.firstIndex { $0.matches(claims) }
    }
}
