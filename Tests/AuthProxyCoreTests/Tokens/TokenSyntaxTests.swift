import Testing

@testable import AuthProxyCore

/// A token that could not go into a request head as it is never becomes a token (issue 35, item 1).
@Suite struct TokenSyntaxTests {
    @Test func arcgisTokensAreVisibleASCII() {
        #expect(TokenSyntax.arcgisProblem("Xy-_.Za9pQ~+/=") == nil)
        #expect(TokenSyntax.arcgisProblem("tok\r\nX-Injected: 1") != nil)
        #expect(TokenSyntax.arcgisProblem("a b") != nil)
        #expect(TokenSyntax.arcgisProblem("a\u{0}") != nil)
        #expect(TokenSyntax.arcgisProblem("a\u{7F}") != nil)
        #expect(TokenSyntax.arcgisProblem("caf\u{E9}") != nil)
        #expect(TokenSyntax.arcgisProblem("") != nil)
    }

    @Test func bearerTokensAreB64Tokens() {
        #expect(TokenSyntax.bearerProblem("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln") == nil)
        #expect(TokenSyntax.bearerProblem("abc+/~-._==") == nil)
        #expect(TokenSyntax.bearerProblem("a=b") != nil)
        #expect(TokenSyntax.bearerProblem("=abc") != nil)
        #expect(TokenSyntax.bearerProblem("a,b") != nil)
        #expect(TokenSyntax.bearerProblem("a\"b") != nil)
        #expect(TokenSyntax.bearerProblem("tok\r\nX: 1") != nil)
    }

    @Test func theMessageNamesTheByteNotTheToken() {
        let why = TokenSyntax.arcgisProblem("secretpart\r\nrest") ?? ""
        #expect(why.contains("0x0D at byte 10"))
        #expect(!why.contains("secret"))
    }

    @Test func anOAuth2AnswerWithASmuggledTokenIsAnOutage() {
        let body = #"{"access_token":"tok\r\nX-Injected: 1\r\n\r\nGET /smuggled HTTP/1.1","expires_in":3600}"#
        let answer = OAuth2TokenAnswer.classify(
            status: 200, body: Array(body.utf8), now: 1_000_000, defaultLifetimeSeconds: 300)
        guard case .outage(let why) = answer else {
            Issue.record("expected an outage, got \(answer)")
            return
        }
        #expect(why.contains("b64token"))
        #expect(!why.contains("smuggled"))
    }
}
