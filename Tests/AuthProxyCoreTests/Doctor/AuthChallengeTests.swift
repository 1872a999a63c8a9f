import Testing

@testable import AuthProxyCore

@Suite struct DoctorAuthChallengeTests {
    private func schemes(_ fields: [String]) -> [String] { AuthChallenge.parse(fields: fields).map(\.scheme) }

    @Test func basicWithRealm() {
        #expect(
            AuthChallenge.parse(#"Basic realm="authproxy-basic""#) == [
                AuthChallenge(scheme: "Basic", parameters: [("realm", "authproxy-basic")])
            ])
    }

    @Test func digestParametersWithQuotedCommasAndEscapes() {
        let c = AuthChallenge.parse(
            #"Digest realm="a, b \"c\"", nonce="n0==", algorithm=MD5, domain="/", qop="auth,auth-int""#)
        #expect(c.count == 1)
        #expect(c[0].is("digest"))
        #expect(c[0].realm == #"a, b "c""#)
        #expect(c[0].parameter("NONCE") == "n0==")
        #expect(c[0].parameter("algorithm") == "MD5")
        #expect(c[0].parameter("qop") == "auth,auth-int")
        #expect(c[0].token68 == nil)
    }

    /// RFC 9110 §11.6.1's own example: two challenges in one field, parameters and challenges both after commas.
    @Test func severalChallengesInOneField() {
        let c = AuthChallenge.parse(#"Newauth realm="apps", type=1, title="Login to \"apps\"", Basic realm="simple""#)
        #expect(c.map(\.scheme) == ["Newauth", "Basic"])
        #expect(c[0].parameters.map(\.name) == ["realm", "type", "title"])
        #expect(c[0].parameter("title") == #"Login to "apps""#)
        #expect(c[1].realm == "simple")
    }

    @Test(
        arguments: [
            ([#"Negotiate"#, #"NTLM"#], ["Negotiate", "NTLM"]),  // IIS: two fields
            ([#"Negotiate, NTLM"#], ["Negotiate", "NTLM"]),
            ([#"Basic realm="x", Digest realm="y", nonce="z", qop="auth""#], ["Basic", "Digest"]),
            ([#" , Basic realm="x" ,, "#], ["Basic"]),  // empty list elements
            ([#"NTLM TlRMTVNTUAACAAAADAAMADgAAAAFgomi+/AB=="#, #"Basic realm="r""#], ["NTLM", "Basic"]),
            ([""], []),
            (
                [#"Bearer realm="example", error="invalid_token", error_description="The access token expired""#],
                ["Bearer"]
            ),
        ] as [([String], [String])])
    func schemesInOrder(_ fields: [String], _ expected: [String]) {
        #expect(schemes(fields) == expected)
    }

    @Test func token68KeepsItsPadding() {
        let c = AuthChallenge.parse("Negotiate oYGzMIGwoAMKAQChCwYJKoZIgvcSAQICooGbBIGY+/a=, NTLM")
        #expect(c.count == 2)
        #expect(c[0].token68 == "oYGzMIGwoAMKAQChCwYJKoZIgvcSAQICooGbBIGY+/a=")
        #expect(c[0].parameters.isEmpty)
        #expect(c[1].is("ntlm") && c[1].token68 == nil)
    }

    /// `abc=` reads as a token68 (padding), not as a parameter with an empty value.
    @Test func token68EndingInEqualsIsNotAParameter() {
        let c = AuthChallenge.parse("Foo abc=")
        #expect(c == [AuthChallenge(scheme: "Foo", token68: "abc=")])
    }

    @Test func malformedPartsAreSkippedNotFatal() {
        // An unclosed quote ruins only its own challenge's parameters; a stray parameter after a token68 is no scheme.
        #expect(schemes([#"Basic realm="unclosed, Digest realm="d""#]).first == "Basic")
        #expect(schemes(["Negotiate abc, realm=\"x\", NTLM"]) == ["Negotiate", "NTLM"])
        #expect(schemes([#""quoted" realm="x", Basic"#]) == ["Basic"])
    }

    @Test func schemeAndParameterNamesAreCaseInsensitive() {
        let c = AuthChallenge.parse(#"bAsIc REALM="R""#)
        #expect(c[0].is("Basic"))
        #expect(c[0].realm == "R")
    }

    @Test func descriptionNeverShowsHandshakeTokens() {
        let c = AuthChallenge.parse("NTLM TlRMTVNTUAACAAAADAAMADgAAAAFgomi")
        #expect(c[0].description == "NTLM")
        let d = AuthChallenge.parse(#"Digest realm="r", nonce="secret-nonce", qop="auth""#)
        #expect(d[0].description == #"Digest realm="r" qop="auth""#)
    }
}
