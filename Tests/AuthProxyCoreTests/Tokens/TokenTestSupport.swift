import Testing

@testable import AuthProxyCore

/// What the token suites share: a credential from a TOML snippet, and the cache key a URL gets for it.
enum TokenTestSupport {
    static func credential(_ body: String) throws -> Credential {
        try #require(
            try ConfigLoader(environment: [:]).parse("[proxy]\nlisten = [\"127.0.0.1:3128\"]\n" + body).credentials
                .first)
    }

    static func key(_ c: Credential, _ url: String) -> String {
        guard case .absolute(let u)? = try? RequestHeadParser.parseTarget(method: "GET", url) else {
            Issue.record("bad url \(url)")
            return ""
        }
        return TokenService.key(for: c, target: u)
    }
}
