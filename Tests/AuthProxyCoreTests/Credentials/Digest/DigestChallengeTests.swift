import Testing

@testable import AuthProxyCore

@Suite struct DigestChallengeTests {
    private func pick(_ values: [String]) -> DigestChallenge.Pick {
        DigestChallenge.pick(AuthChallenge.parse(fields: values))
    }

    @Test func apacheChallenge() {
        let p = pick([#"Digest realm="authproxy-test", nonce="abc=", algorithm=MD5, domain="/", qop="auth""#])
        guard case .usable(let c) = p else {
            Issue.record("\(p)")
            return
        }
        #expect(c.realm == "authproxy-test" && c.nonce == "abc=" && c.algorithm == .md5 && c.qop == ["auth"])
        #expect(c.opaque == nil && !c.stale && !c.utf8)
    }

    @Test func prefersSHA256AndIgnoresOtherSchemes() {
        let p = pick([
            #"Basic realm="b""#, #"Digest realm="r", nonce="1", algorithm=MD5, qop="auth""#,
            #"Digest realm="r", nonce="2", algorithm=SHA-256, qop="auth", stale=TRUE"#,
        ])
        guard case .usable(let c) = p else {
            Issue.record("\(p)")
            return
        }
        #expect(c.nonce == "2" && c.algorithm == .sha256 && c.stale)
    }

    @Test func noDigestOffered() {
        #expect(pick([#"Basic realm="b""#, "NTLM"]) == .none)
        #expect(pick([]) == .none)
    }

    @Test func unusableChallengesSayWhy() {
        #expect(
            pick([#"Digest realm="r", nonce="1", algorithm=SHA-512-256"#])
                == .unusable(.unsupportedAlgorithm("SHA-512-256")))
        #expect(pick([#"Digest realm="r", nonce="1", userhash=true"#]) == .unusable(.userhash))
        #expect(pick([#"Digest realm="r""#]) == .unusable(.missing("nonce")))
        // A usable one next to an unusable one is answered.
        guard
            case .usable(let c) = pick([
                #"Digest realm="r", nonce="1", algorithm=SHA-512-256"#, #"Digest realm="r", nonce="2""#,
            ])
        else {
            Issue.record("not usable")
            return
        }
        #expect(c.nonce == "2")
    }

    @Test func qopChoice() throws {
        func challenge(_ qop: String?) throws -> DigestChallenge {
            let q = qop.map { #", qop="\#($0)""# } ?? ""
            return try DigestChallenge(try #require(AuthChallenge.parse(#"Digest realm="r", nonce="n""# + q).first))
        }
        #expect(try challenge("auth-int, auth").chooseQop(hasBody: true) == .auth)
        #expect(try challenge("auth-int").chooseQop(hasBody: false) == .authIntEmptyBody)
        #expect(throws: DigestChallenge.Refusal.authIntWithBody) { try challenge("auth-int").chooseQop(hasBody: true) }
        #expect(throws: DigestChallenge.Refusal.unsupportedQop("x-new")) {
            try challenge("x-new").chooseQop(hasBody: false)
        }
        #expect(try challenge(nil).chooseQop(hasBody: true) == DigestQop.none)
        #expect(DigestChallenge.Refusal.authIntWithBody.description.contains("auth-int"))
    }
}

@Suite struct PasswordDigestUnanswerableTests {
    private func pw(_ schemes: Set<PasswordScheme>) -> PasswordSettings {
        PasswordSettings(username: "u", password: "p", domain: nil, schemes: schemes, allowBasicOverHTTP: false)
    }

    @Test func namesTheDigestCause() {
        let sha512 = AuthChallenge.parse(#"Digest realm="r", nonce="n", algorithm=SHA-512-256"#)
        #expect(
            pw([.digest]).unanswerable(challenges: sha512, overHTTPS: false, hasBody: false)?.contains("SHA-512-256")
                == true)
        let authInt = AuthChallenge.parse(#"Digest realm="r", nonce="n", qop="auth-int""#)
        #expect(pw([.digest]).unanswerable(challenges: authInt, overHTTPS: false, hasBody: false) == nil)
        #expect(
            pw([.digest]).unanswerable(challenges: authInt, overHTTPS: false, hasBody: true)?.contains("auth-int")
                == true)
        // A usable challenge refused: the password is wrong, not the settings.
        let fine = AuthChallenge.parse(#"Digest realm="r", nonce="n", qop="auth""#)
        #expect(pw([.digest]).unanswerable(challenges: fine, overHTTPS: false, hasBody: true) == nil)
        // Basic could answer instead (over https).
        let both = AuthChallenge.parse(#"Basic realm="b", Digest realm="r", nonce="n", algorithm=SHA-512-256"#)
        #expect(pw([.basic, .digest]).unanswerable(challenges: both, overHTTPS: true, hasBody: false) == nil)
        #expect(
            pw([.basic]).unanswerable(challenges: fine, overHTTPS: true, hasBody: false)
                == "the server offers digest; the credential's schemes are basic")
    }
}
