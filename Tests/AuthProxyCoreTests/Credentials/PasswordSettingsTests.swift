import Testing

@testable import AuthProxyCore

/// ``PasswordSettings/unanswerable(offered:overHTTPS:)``: a 401 the credential could not answer because of its
/// settings is told apart from a wrong password.
@Suite struct PasswordSettingsTests {
    static func settings(_ schemes: Set<PasswordScheme>, allowBasicOverHTTP: Bool = false) -> PasswordSettings {
        PasswordSettings(
            username: "u", password: "p", domain: nil, schemes: schemes, allowBasicOverHTTP: allowBasicOverHTTP)
    }

    @Test func basicOnlyOverHTTPNamesTheSetting() throws {
        let all = Self.settings([.basic, .digest, .ntlm])
        let cause = try #require(all.unanswerable(offered: ["Basic"], overHTTPS: false))
        #expect(cause.contains("allow_basic_over_http = true"))
        #expect(all.unanswerable(offered: ["Basic"], overHTTPS: true) == nil)
        #expect(
            Self.settings([.basic], allowBasicOverHTTP: true).unanswerable(offered: ["basic"], overHTTPS: false) == nil)
    }

    @Test func answerableChallengesMeanTheSecretWasRefused() {
        let all = Self.settings([.basic, .digest, .ntlm])
        #expect(all.unanswerable(offered: ["Basic", "Digest"], overHTTPS: false) == nil)
        #expect(all.unanswerable(offered: ["NTLM", "Negotiate"], overHTTPS: false) == nil)
        #expect(all.unanswerable(offered: [], overHTTPS: false) == nil)
    }

    @Test func schemesTheCredentialLeavesOutAreNamed() throws {
        let digestOnly = Self.settings([.digest])
        let cause = try #require(digestOnly.unanswerable(offered: ["NTLM", "Negotiate"], overHTTPS: true))
        #expect(cause == "the server offers negotiate, ntlm; the credential's schemes are digest")
    }
}
