import Foundation
import Testing

@testable import AuthProxyCore

/// `grant = "jwt_bearer"` (Google service accounts, IAP's ID tokens), `grant = "token_exchange"` (RFC 8693) and
/// `token_placement = "proxy-authorization"` in proxy.conf: defaults, and refusals naming the key.
@Suite struct OAuth2GrantConfigTests {
    let loader = ConfigLoader(environment: [:])
    let dir: String
    let account: String
    let subject: String
    let pem: String

    init() throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("oauth2-grants-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        account = dir + "/sa.json"
        subject = dir + "/subject.jwt"
        pem = dir + "/key.pem"
        try Data(
            OAuth2IAPAndExchangeTests.accountJSON([
                "type": "service_account", "client_email": "gis@p.iam.gserviceaccount.com",
                "private_key": OAuth2IAPAndExchangeTests.rsaPEM, "private_key_id": "k1",
                "token_uri": "http://127.0.0.1:9/token",
            ])
        ).write(to: URL(fileURLWithPath: account))
        try "a.b.c".write(toFile: subject, atomically: true, encoding: .utf8)
        try OAuth2IAPAndExchangeTests.rsaPEM.write(toFile: pem, atomically: true, encoding: .utf8)
    }

    func entry(_ body: String) -> String {
        "[[credential]]\nname = \"iap\"\ntype = \"oauth2\"\nmatch = [\"https://app.example.com/\"]\n" + body
    }

    @Test func aServiceAccountFileIsTheWholeIAPCredential() throws {
        let c = try loader.parse(
            entry(
                """
                service_account_file = "\(account)"
                target_audience = "123-abc.apps.googleusercontent.com"
                token_placement = "proxy-authorization"
                layer = "gateway"
                """))
        let o = try #require(c.credentials[0].oauth2)
        #expect(o.grant == .jwtBearer && o.clientID == "gis@p.iam.gserviceaccount.com")
        #expect(o.endpoint == .tokenURL("http://127.0.0.1:9/token") && o.providerHost == "127.0.0.1")
        #expect(o.tokenField == .idToken && o.placement == .proxyAuthorization)
        #expect(o.rejection == [.iap, .redirectToIssuer])
        #expect(o.identityMaterial.contains("123-abc.apps.googleusercontent.com"))
        #expect(c.credentials[0].layer == .gateway)
    }

    @Test func aPrivateKeyCanSignTheGrantWithClientIDAsIssuer() throws {
        let c = try loader.parse(
            entry(
                """
                token_url = "https://idp.example.com/token"
                grant = "jwt_bearer"
                client_id = "svc@example.com"
                private_key = "\(pem)"
                kid = "k9"
                scope = "read"
                token_field = "access_token"
                rejection = ["invalid_token"]
                """))
        let o = try #require(c.credentials[0].oauth2)
        #expect(o.grant == .jwtBearer && o.tokenField == .accessToken && o.rejection == [.invalidToken])
        #expect(o.privateKey == pem && o.kid == "k9")
    }

    @Test func aTokenExchangeNeedsNoClient() throws {
        let c = try loader.parse(
            entry(
                """
                token_url = "https://sts.googleapis.com/v1/token"
                grant = "token_exchange"
                subject_token_file = "\(subject)"
                audience = "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/k"
                requested_token_type = "urn:ietf:params:oauth:token-type:access_token"
                scope = "https://www.googleapis.com/auth/cloud-platform"
                """))
        let o = try #require(c.credentials[0].oauth2)
        #expect(o.grant == .tokenExchange && o.clientID.isEmpty && o.subjectTokenFile == subject)
        #expect(o.subjectTokenType == "urn:ietf:params:oauth:token-type:jwt" && o.tokenField == .accessToken)
        let kc = try loader.parse(
            entry(
                """
                issuer = "https://kc.example.com/realms/gis"
                grant = "token_exchange"
                client_id = "proxy"
                client_secret = "s"
                subject_token_file = "\(subject)"
                subject_token_type = "urn:ietf:params:oauth:token-type:access_token"
                """))
        #expect(kc.credentials[0].oauth2?.subjectTokenType == "urn:ietf:params:oauth:token-type:access_token")
    }

    @Test func refusals() {
        let sa = "service_account_file = \"\(account)\"\n"
        let idp = "token_url = \"https://idp.example.com/token\"\n"
        expectRejected(
            loader, entry(sa), key: "credential[0].target_audience", line: 1, fragment: "needs target_audience")
        expectRejected(
            loader, entry(sa + "target_audience = \"a\"\ngrant = \"client_credentials\"\n"),
            key: "credential[0].service_account_file", line: 5, fragment: "only with grant = \"jwt_bearer\"")
        expectRejected(
            loader, entry(sa + "target_audience = \"a\"\nprivate_key = \"\(pem)\"\n"),
            key: "credential[0].private_key", line: 7, fragment: "holds the key")
        expectRejected(
            loader, entry(sa + "target_audience = \"a\"\naudience = \"b\"\n"), key: "credential[0].audience",
            line: 7, fragment: "is not sent with grant = \"jwt_bearer\"")
        expectRejected(
            loader, entry("service_account_file = \"\(dir)/missing.json\"\ntarget_audience = \"a\"\n"),
            key: "credential[0].service_account_file", line: 5, fragment: "cannot read service_account_file")
        expectRejected(
            loader, entry(idp + "grant = \"jwt_bearer\"\nclient_id = \"c\"\ntarget_audience = \"a\"\n"),
            key: "credential[0].service_account_file", line: 1, fragment: "needs service_account_file")
        expectRejected(
            loader, entry(idp + "client_id = \"c\"\nclient_secret = \"s\"\ntarget_audience = \"a\"\n"),
            key: "credential[0].target_audience", line: 8, fragment: "only with grant = \"jwt_bearer\"")
        expectRejected(
            loader, entry(idp + "grant = \"token_exchange\"\n"), key: "credential[0].subject_token_file", line: 1,
            fragment: "needs subject_token_file")
        expectRejected(
            loader,
            entry(idp + "grant = \"token_exchange\"\nsubject_token_file = \"\(dir)/nope\"\n"),
            key: "credential[0].subject_token_file", line: 7, fragment: "cannot read")
        expectRejected(
            loader,
            entry(idp + "client_id = \"c\"\nclient_secret = \"s\"\nsubject_token_type = \"x\"\n"),
            key: "credential[0].subject_token_type", line: 8, fragment: "only with grant = \"token_exchange\"")
        expectRejected(
            loader,
            entry(idp + "grant = \"token_exchange\"\nsubject_token_file = \"\(subject)\"\nclient_secret = \"s\"\n"),
            key: "credential[0].client_id", line: 1, fragment: "needs client_id")
        expectRejected(
            loader, entry(idp + "client_id = \"c\"\nclient_secret = \"s\"\ntoken_field = \"refresh_token\"\n"),
            key: "credential[0].token_field", line: 8, fragment: "is not one of \"access_token\", \"id_token\"")
        expectRejected(
            loader, entry(idp + "client_id = \"c\"\nclient_secret = \"s\"\ngrant = \"device\"\n"),
            key: "credential[0].grant", line: 8, fragment: "\"jwt_bearer\", \"token_exchange\"")
    }
}
