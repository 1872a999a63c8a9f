import Testing

@testable import AuthProxyCore

/// ``S3ErrorDiagnosis``: the log line for the refusals that are the signing credential's fault, from the bodies S3
/// sends.
@Suite struct S3ErrorDiagnosisTests {
    static func body(_ s: String) -> [UInt8] { Array(s.utf8) }

    @Test func signatureMismatchNamesTheCredentialAndTheLikelyCause() throws {
        let xml = """
            <?xml version="1.0" encoding="UTF-8"?>
            <Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated does not match the signature you provided. Check your key and signing method.</Message><AWSAccessKeyId>AKIAEXAMPLE</AWSAccessKeyId><StringToSign>AWS4-HMAC-SHA256…</StringToSign><RequestId>1</RequestId></Error>
            """
        let d = try #require(
            S3ErrorDiagnosis.diagnose(
                status: 403, body: Self.body(xml), credential: "s3-cogs", temporary: false, requestTime: nil))
        #expect(d.message.contains("credential 's3-cogs'") && d.message.contains("SignatureDoesNotMatch"))
        #expect(d.message.contains("secret_access_key"))
        #expect(!d.credentialsExpired)
    }

    @Test func clockSkewSaysByHowMuchAndWhichWay() throws {
        let xml = """
            <Error><Code>RequestTimeTooSkewed</Code><Message>The difference between the request time and the current time is too large.</Message><RequestTime>20261128T100000Z</RequestTime><ServerTime>2026-11-28T10:20:00Z</ServerTime><MaxAllowedSkewMilliseconds>900000</MaxAllowedSkewMilliseconds></Error>
            """
        let d = try #require(
            S3ErrorDiagnosis.diagnose(
                status: 403, body: Self.body(xml), credential: "c", temporary: false, requestTime: nil))
        #expect(
            d.message.contains("by about 1200 s: it is behind the server's (the server allows 900 s)"), "\(d.message)")
        #expect(d.message.contains("NTP"))
        // Without RequestTime, the time the proxy signed at.
        let noRequestTime =
            "<Error><Code>RequestTimeTooSkewed</Code><ServerTime>2026-11-28T10:00:00Z</ServerTime></Error>"
        let ahead = try #require(
            S3ErrorDiagnosis.diagnose(
                status: 403, body: Self.body(noRequestTime), credential: "c", temporary: false,
                requestTime: 1_795_860_000_000 + 1_800_000))
        #expect(ahead.message.contains("by about 1800 s: it is ahead of the server's"), "\(ahead.message)")
        let bare = try #require(
            S3ErrorDiagnosis.diagnose(
                status: 403, body: Self.body("<Error><Code>RequestTimeTooSkewed</Code></Error>"), credential: "c",
                temporary: false, requestTime: nil))
        #expect(bare.message.contains("clock") && !bare.message.contains("by about"))
    }

    @Test func timesInEveryShapeS3Uses() {
        #expect(S3ErrorDiagnosis.parseTime("2026-11-28T10:00:00Z") == 1_795_860_000_000)
        #expect(S3ErrorDiagnosis.parseTime("20261128T100000Z") == 1_795_860_000_000)
        #expect(S3ErrorDiagnosis.parseTime("Sat, 28 Nov 2026 10:00:00 GMT") == 1_795_860_000_000)
        #expect(S3ErrorDiagnosis.parseTime("yesterday") == nil)
    }

    @Test func expiredTemporaryCredentialsAskForNewOnes() throws {
        let xml = "<Error><Code>ExpiredToken</Code><Message>The provided token has expired.</Message></Error>"
        let temporary = try #require(
            S3ErrorDiagnosis.diagnose(
                status: 400, body: Self.body(xml), credential: "c", temporary: true, requestTime: nil))
        #expect(temporary.credentialsExpired)
        let configured = try #require(
            S3ErrorDiagnosis.diagnose(
                status: 400, body: Self.body(xml), credential: "c", temporary: false, requestTime: nil))
        #expect(!configured.credentialsExpired && configured.message.contains("session_token"))
    }

    @Test func otherAnswersSayNothing() {
        let denied = "<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
        #expect(
            S3ErrorDiagnosis.diagnose(
                status: 403, body: Self.body(denied), credential: "c", temporary: false, requestTime: nil) == nil)
        let mismatch = "<Error><Code>SignatureDoesNotMatch</Code></Error>"
        #expect(
            S3ErrorDiagnosis.diagnose(
                status: 200, body: Self.body(mismatch), credential: "c", temporary: false, requestTime: nil) == nil)
        #expect(
            S3ErrorDiagnosis.diagnose(
                status: 403, body: Self.body("{\"error\":1}"), credential: "c", temporary: false, requestTime: nil)
                == nil)
        // Only the first bytes are read.
        let late = String(repeating: " ", count: S3ErrorDiagnosis.bodyLimit) + mismatch
        #expect(
            S3ErrorDiagnosis.diagnose(
                status: 403, body: Self.body(late), credential: "c", temporary: false, requestTime: nil) == nil)
    }
}
