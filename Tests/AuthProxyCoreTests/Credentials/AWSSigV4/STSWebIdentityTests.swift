import Testing

@testable import AuthProxyCore

/// ``STSWebIdentity``: the `AssumeRoleWithWebIdentity` request and its answers in the shapes STS sends them (the
/// XML of the API reference, the JSON it answers `Accept: application/json` with).
@Suite struct STSWebIdentityTests {
    static let w = STSWebIdentity(
        roleARN: "arn:aws:iam::123456789012:role/r", tokenFile: "/t", sessionName: "authproxy-x",
        endpoint: "https://sts.us-east-1.amazonaws.com/", durationSeconds: 3600)

    @Test func formCarriesTheRoleAndTheToken() {
        let f = Self.w.form(token: "eyJ.a.b")
        #expect(f.first { $0.0 == "Action" }?.1 == "AssumeRoleWithWebIdentity")
        #expect(f.first { $0.0 == "Version" }?.1 == "2011-06-15")
        #expect(f.first { $0.0 == "RoleArn" }?.1 == "arn:aws:iam::123456789012:role/r")
        #expect(f.first { $0.0 == "WebIdentityToken" }?.1 == "eyJ.a.b")
        #expect(f.first { $0.0 == "DurationSeconds" }?.1 == "3600")
    }

    @Test func xmlAnswer() {
        let xml = """
            <AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
              <AssumeRoleWithWebIdentityResult>
                <SubjectFromWebIdentityToken>amzn1.account.AF6RHO7KZU5XRVQJGXK6HB56KR2A</SubjectFromWebIdentityToken>
                <Audience>client.5498841531868486423.1548@apps.example.com</Audience>
                <AssumedRoleUser>
                  <Arn>arn:aws:sts::123456789012:assumed-role/FederatedWebIdentityRole/app1</Arn>
                  <AssumedRoleId>AROACLKWSDQRAOEXAMPLE:app1</AssumedRoleId>
                </AssumedRoleUser>
                <Credentials>
                  <SessionToken>AQoDYXdzEE0a8ANXXXXXXXXNO1ewxE5TijQyp+IEXAMPLE</SessionToken>
                  <SecretAccessKey>wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY</SecretAccessKey>
                  <Expiration>2014-10-24T23:00:23Z</Expiration>
                  <AccessKeyId>ASgeIAIOSFODNN7EXAMPLE</AccessKeyId>
                </Credentials>
                <SourceIdentity>SourceIdentityValue</SourceIdentity>
                <Provider>www.amazon.com</Provider>
              </AssumeRoleWithWebIdentityResult>
              <ResponseMetadata><RequestId>ad4156e9-bce1-11e2-82e6-6b6efEXAMPLE</RequestId></ResponseMetadata>
            </AssumeRoleWithWebIdentityResponse>
            """
        #expect(
            STSWebIdentity.classify(status: 200, body: Array(xml.utf8))
                == .credentials(
                    AWSCredentials(
                        accessKeyID: "ASgeIAIOSFODNN7EXAMPLE",
                        secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY",
                        sessionToken: "AQoDYXdzEE0a8ANXXXXXXXXNO1ewxE5TijQyp+IEXAMPLE"), expires: 1_414_191_623_000))
    }

    @Test func jsonAnswer() {
        let json = """
            {"AssumeRoleWithWebIdentityResponse":{"AssumeRoleWithWebIdentityResult":{"Credentials":{"AccessKeyId":"ASIA1","Expiration":1.414191623E9,"SecretAccessKey":"sec/ret","SessionToken":"tok+en="}},"ResponseMetadata":{"RequestId":"x"}}}
            """
        #expect(
            STSWebIdentity.classify(status: 200, body: Array(json.utf8))
                == .credentials(
                    AWSCredentials(accessKeyID: "ASIA1", secretAccessKey: "sec/ret", sessionToken: "tok+en="),
                    expires: 1_414_191_623_000))
        let error =
            #"{"Error":{"Code":"InvalidIdentityToken","Message":"Couldn't retrieve verification key","Type":"Sender"}}"#
        #expect(
            STSWebIdentity.classify(status: 400, body: Array(error.utf8))
                == .refused(code: "InvalidIdentityToken", message: "Couldn't retrieve verification key"))
    }

    @Test func refusalsAndOutages() {
        let denied = """
            <ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
              <Error><Type>Sender</Type><Code>AccessDenied</Code><Message>Not authorized to perform sts:AssumeRoleWithWebIdentity</Message></Error>
              <RequestId>1</RequestId>
            </ErrorResponse>
            """
        #expect(
            STSWebIdentity.classify(status: 403, body: Array(denied.utf8))
                == .refused(code: "AccessDenied", message: "Not authorized to perform sts:AssumeRoleWithWebIdentity"))
        #expect(!STSWebIdentity.advice("AccessDenied").isEmpty)
        let throttled =
            "<ErrorResponse><Error><Code>Throttling</Code><Message>Rate exceeded</Message></Error></ErrorResponse>"
        guard case .outage = STSWebIdentity.classify(status: 400, body: Array(throttled.utf8)) else {
            Issue.record("throttling is no refusal")
            return
        }
        guard case .outage = STSWebIdentity.classify(status: 502, body: Array("<html>bad gateway</html>".utf8)) else {
            Issue.record("a gateway page is an outage")
            return
        }
        let incomplete = "<Credentials><AccessKeyId>A</AccessKeyId></Credentials>"
        guard case .outage = STSWebIdentity.classify(status: 200, body: Array(incomplete.utf8)) else {
            Issue.record("an answer without a secret is no credentials")
            return
        }
        let injected =
            "<Credentials><AccessKeyId>A</AccessKeyId><SecretAccessKey>s\r\nX: y</SecretAccessKey><SessionToken>t</SessionToken><Expiration>2014-10-24T23:00:23Z</Expiration></Credentials>"
        guard case .outage = STSWebIdentity.classify(status: 200, body: Array(injected.utf8)) else {
            Issue.record("credentials that would break a head are refused")
            return
        }
    }

    @Test func entitiesAreDecoded() {
        #expect(AWSXML.text(of: "Message", in: "<Error><Message>a &lt;b&gt; &amp; c</Message></Error>") == "a <b> & c")
        #expect(AWSXML.text(of: "Code", in: "<Error><CodeX>1</CodeX><Code>2</Code></Error>") == "2")
        #expect(AWSXML.text(of: "Code", in: "<Error><Code>unterminated") == nil)
    }
}
