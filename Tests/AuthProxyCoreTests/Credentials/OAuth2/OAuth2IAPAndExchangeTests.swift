import CAuthProxyShims
import COpenSSL
import Foundation
import Testing

@testable import AuthProxyCore

/// Google IAP (jwt-bearer grant, ID tokens, Proxy-Authorization) and RFC 8693 token exchange on `oauth2`: the pure
/// parts, as tables.
@Suite struct OAuth2IAPAndExchangeTests {
    static let rsaPEM: String = {
        let key = ap_rsa_keygen(2048)!
        defer { EVP_PKEY_free(key) }
        return String(decoding: ClientAssertionJWTTests.pem(key)!, as: UTF8.self)
    }()

    static func accountJSON(_ members: [String: Any]) -> [UInt8] {
        Array(try! JSONSerialization.data(withJSONObject: members))
    }

    static func settings(_ grant: OAuth2Settings.Grant, clientID: String = "proxy") -> OAuth2Settings {
        var s = OAuth2Settings(endpoint: .tokenURL("https://oauth2.googleapis.com/token"), clientID: clientID)
        s.grant = grant
        return s
    }

    static func json(_ s: String) throws -> [String: Any] {
        try JSONSerialization.jsonObject(with: Data(s.utf8)) as! [String: Any]
    }

    // MARK: service-account key files

    @Test func aServiceAccountKeyFileGivesEmailKeyKidAndTokenURI() throws {
        let full = ServiceAccountKey.parse(
            Self.accountJSON([
                "type": "service_account", "client_email": "gis@p.iam.gserviceaccount.com",
                "private_key": Self.rsaPEM, "private_key_id": "abc123", "token_uri": "http://127.0.0.1:9/token",
            ]), source: "'sa.json'")
        let a = try full.get()
        #expect(a.clientEmail == "gis@p.iam.gserviceaccount.com" && a.privateKeyID == "abc123")
        #expect(a.tokenURI == "http://127.0.0.1:9/token")
        _ = try a.signingKey(source: "'sa.json'").get()
        // No token_uri: Google's.
        let bare = try ServiceAccountKey.parse(
            Self.accountJSON(["client_email": "x@y", "private_key": Self.rsaPEM]), source: "'s'"
        ).get()
        #expect(bare.tokenURI == "https://oauth2.googleapis.com/token" && bare.privateKeyID == nil)
    }

    @Test(arguments: [
        ("not json", "is not a JSON object"),
        (
            #"{"type":"authorized_user","client_email":"a","private_key":"-----BEGIN PRIVATE KEY-----"}"#,
            #"is a "authorized_user" credential"#
        ),
        (#"{"private_key":"-----BEGIN PRIVATE KEY-----"}"#, "has no client_email"),
        (#"{"client_email":"a@b","private_key":"secret-but-no-pem"}"#, "has no PEM private_key"),
        (
            #"{"client_email":"a@b","private_key":"-----BEGIN PRIVATE KEY-----","token_uri":"ftp://x"}"#,
            "token_uri of 'sa.json' is not an http(s) URL"
        ),
    ])
    func badServiceAccountFilesAreRefusedWithoutQuotingTheKey(text: String, fragment: String) {
        guard case .failure(let why) = ServiceAccountKey.parse(Array(text.utf8), source: "'sa.json'") else {
            Issue.record("accepted \(text)")
            return
        }
        #expect(why.message.contains(fragment), "\(why.message)")
        #expect(!why.message.contains("secret-but-no-pem") && !why.message.contains("BEGIN"))
    }

    @Test func aServiceAccountKeyThatIsNotRSAIsRefused() throws {
        let ec = try #require(ap_ec_p256_keygen())
        defer { EVP_PKEY_free(ec) }
        let pem = String(decoding: try #require(ClientAssertionJWTTests.pem(ec)), as: UTF8.self)
        let a = try ServiceAccountKey.parse(
            Self.accountJSON(["client_email": "a@b", "private_key": pem]), source: "'sa.json'"
        ).get()
        guard case .failure(let why) = a.signingKey(source: "'sa.json'") else {
            Issue.record("an EC key signed RS256")
            return
        }
        #expect(why.message.contains("not an RSA key"))
    }

    // MARK: the jwt-bearer assertion

    @Test func theAssertionAsksGoogleForAnIDTokenOrAnAccessToken() throws {
        let id = try Self.json(
            JWTBearerGrant.claims(
                issuer: "gis@p.iam.gserviceaccount.com", audience: "https://oauth2.googleapis.com/token",
                targetAudience: "123-abc.apps.googleusercontent.com", scope: nil, issuedAt: 1_000))
        #expect(id["iss"] as? String == "gis@p.iam.gserviceaccount.com" && id["sub"] as? String == id["iss"] as? String)
        #expect(id["aud"] as? String == "https://oauth2.googleapis.com/token")
        #expect(id["target_audience"] as? String == "123-abc.apps.googleusercontent.com" && id["scope"] == nil)
        #expect((id["iat"] as? NSNumber)?.intValue == 1_000 && (id["exp"] as? NSNumber)?.intValue == 1_300)
        let access = try Self.json(
            JWTBearerGrant.claims(issuer: "a", audience: "b", targetAudience: nil, scope: "s1 s2", issuedAt: 5))
        #expect(access["scope"] as? String == "s1 s2" && access["target_audience"] == nil)
        #expect(JWTBearerGrant.header(alg: .rs256, kid: "k") == #"{"alg":"RS256","typ":"JWT","kid":"k"}"#)
    }

    @Test func theAssertionIsSignedWithTheServiceAccountKeyReadFromItsFile() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sa-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("sa.json").path
        try Data(
            Self.accountJSON([
                "type": "service_account", "client_email": "gis@p.iam", "private_key": Self.rsaPEM,
                "private_key_id": "kid-1",
            ])
        ).write(to: URL(fileURLWithPath: path))
        var s = Self.settings(.jwtBearer, clientID: "gis@p.iam")
        s.serviceAccountFile = path
        s.targetAudience = "iap-client"
        let jwt = try TokenFetcher.jwtBearerAssertion(s, audience: "https://oauth2.googleapis.com/token", now: 77)
            .get()
        let parts = jwt.split(separator: ".").map(String.init)
        #expect(parts.count == 3)
        let header = try Self.json(String(decoding: try #require(Base64URL.decode(parts[0])), as: UTF8.self))
        let claims = try Self.json(String(decoding: try #require(Base64URL.decode(parts[1])), as: UTF8.self))
        #expect(header["kid"] as? String == "kid-1" && header["alg"] as? String == "RS256")
        #expect(claims["iss"] as? String == "gis@p.iam" && claims["target_audience"] as? String == "iap-client")
        #expect((claims["iat"] as? NSNumber)?.intValue == 77)
        // The signature verifies with the key of the file.
        let bio = try #require(Self.rsaPEM.withCString { BIO_new_mem_buf($0, Int32(strlen($0))) })
        defer { BIO_free(bio) }
        let key = try #require(ap_pem_read_private_key(bio, nil))
        defer { EVP_PKEY_free(key) }
        #expect(
            ClientAssertionJWTTests.verify(
                key, pss: false, parts[0] + "." + parts[1], try #require(Base64URL.decode(parts[2]))))
        // A file gone at request time: the message names the file.
        try FileManager.default.removeItem(atPath: path)
        guard case .failure(let why) = TokenFetcher.jwtBearerAssertion(s, audience: "a", now: 1) else {
            Issue.record("signed without a key")
            return
        }
        #expect(why.message.contains("cannot read service_account_file '\(path)'"))
    }

    // MARK: token requests

    @Test func theJWTBearerRequestIsTheAssertionAlone() {
        var s = Self.settings(.jwtBearer, clientID: "gis@p.iam")
        s.scope = "openid"  // in the assertion, not in the form
        let r = OAuth2TokenRequest.make(s, method: .none, proof: .settings, grant: .jwtBearer(assertion: "h.c.s"))
        #expect(
            r.fields.map { "\($0.0)=\($0.1)" } == [
                "grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion=h.c.s",
            ])
        #expect(r.headers.isEmpty)
    }

    @Test func aTokenExchangeCarriesTheSubjectTokenItsTypeAndTheTarget() {
        var s = Self.settings(.tokenExchange, clientID: "")
        s.audience = "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/k8s"
        s.scope = "https://www.googleapis.com/auth/cloud-platform"
        s.requestedTokenType = "urn:ietf:params:oauth:token-type:access_token"
        // Without client_id (an STS): no client authentication at all.
        let sts = OAuth2TokenRequest.make(
            s, method: .none, proof: .settings, grant: .tokenExchange(subjectToken: "SUBJECT"))
        #expect(
            sts.fields.map { "\($0.0)=\($0.1)" } == [
                "grant_type=urn:ietf:params:oauth:grant-type:token-exchange", "subject_token=SUBJECT",
                "subject_token_type=urn:ietf:params:oauth:token-type:jwt",
                "requested_token_type=urn:ietf:params:oauth:token-type:access_token",
                "scope=https://www.googleapis.com/auth/cloud-platform",
                "audience=//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/k8s",
            ])
        // Keycloak: a confidential client authenticates as for any grant.
        var kc = Self.settings(.tokenExchange, clientID: "proxy")
        kc.clientSecret = "s"
        kc.subjectTokenType = "urn:ietf:params:oauth:token-type:access_token"
        let post = OAuth2TokenRequest.make(
            kc, method: .clientSecretPost, proof: .settings, grant: .tokenExchange(subjectToken: "T"))
        #expect(
            post.fields.map(\.0) == [
                "grant_type", "subject_token", "subject_token_type", "client_id", "client_secret",
            ])
        #expect(post.fields[2].1 == "urn:ietf:params:oauth:token-type:access_token")
    }

    @Test func theSubjectTokenIsReadFromItsFileAtEachExchange() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("subject-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        var s = Self.settings(.tokenExchange)
        s.subjectTokenFile = path
        try "first.jwt.x\n".write(toFile: path, atomically: true, encoding: .utf8)
        #expect(try TokenFetcher.subjectToken(s).get() == "first.jwt.x")
        try "second.jwt.y".write(toFile: path, atomically: true, encoding: .utf8)
        #expect(try TokenFetcher.subjectToken(s).get() == "second.jwt.y")
        try "  \n".write(toFile: path, atomically: true, encoding: .utf8)
        guard case .failure(let why) = TokenFetcher.subjectToken(s) else {
            Issue.record("an empty subject token")
            return
        }
        #expect(why.message == "subject_token_file '\(path)' is empty")
    }

    // MARK: answers

    static func jwt(exp: Int64) -> String {
        Base64URL.encode(#"{"alg":"RS256"}"#) + "." + Base64URL.encode(#"{"exp":\#(exp)}"#) + ".c2ln"
    }

    static func body(_ members: [String: Any]) -> [UInt8] { accountJSON(members) }

    @Test func googlesIDTokenAnswerLivesUntilItsExp() {
        let now: Int64 = 1_700_000_000_000
        let id = Self.jwt(exp: 1_700_003_600)
        let answer = OAuth2TokenAnswer.classify(
            status: 200, body: Self.body(["id_token": id]), now: now, defaultLifetimeSeconds: 300, field: .idToken)
        guard case .token(let t, nil) = answer else {
            Issue.record("\(answer)")
            return
        }
        #expect(t.value == id && t.expires == 1_700_003_600_000)
        // An expires_in beside it is the access token's: the ID token's exp wins.
        let both = OAuth2TokenAnswer.classify(
            status: 200,
            body: Self.body(["access_token": "AT", "token_type": "Bearer", "expires_in": 60, "id_token": id]),
            now: now, defaultLifetimeSeconds: 300, field: .idToken)
        if case .token(let t, _) = both {
            #expect(t.value == id && t.expires == 1_700_003_600_000)
        } else {
            Issue.record("\(both)")
        }
        // Asked for the ID token, given only an access token: no token (an outage, named).
        let none = OAuth2TokenAnswer.classify(
            status: 200, body: Self.body(["access_token": "AT"]), now: now, defaultLifetimeSeconds: 300,
            field: .idToken)
        #expect(none == .outage(why: "HTTP 200 without an id_token"))
        // And the default field still reads the access token.
        let at = OAuth2TokenAnswer.classify(
            status: 200, body: Self.body(["id_token": id]), now: now, defaultLifetimeSeconds: 300)
        #expect(at == .outage(why: "HTTP 200 without an access_token"))
    }

    @Test func anExchangedTokenOfTypeNAIsStillTheToken() {
        let answer = OAuth2TokenAnswer.classify(
            status: 200,
            body: Self.body([
                "access_token": "EXCHANGED", "issued_token_type": "urn:ietf:params:oauth:token-type:jwt",
                "token_type": "N_A", "expires_in": 120,
            ]), now: 0, defaultLifetimeSeconds: 300)
        if case .token(let t, _) = answer {
            #expect(t.value == "EXCHANGED" && t.expires == 120_000)
        } else {
            Issue.record("\(answer)")
        }
        let mac = OAuth2TokenAnswer.classify(
            status: 200, body: Self.body(["access_token": "X", "token_type": "mac"]), now: 0,
            defaultLifetimeSeconds: 300)
        if case .refused(let e, _) = mac { #expect(e == "unsupported_token_type") } else { Issue.record("\(mac)") }
        let target = OAuth2TokenAnswer.classify(
            status: 400, body: Self.body(["error": "invalid_target"]), now: 0, defaultLifetimeSeconds: 300)
        #expect(target == .refused(error: "invalid_target", description: nil))
    }

    // MARK: Proxy-Authorization

    @Test func proxyAuthorizationLeavesTheClientsAuthorizationAndReplacesItsProxyCredential() {
        let client = HTTPHeaders([
            ("Authorization", "Bearer ARCGIS"), ("Proxy-Authorization", "Basic dXNlcjpwdw=="),
            ("Connection", "keep-alive, Proxy-Authorization"),
        ])
        let path = "/arcgis/rest/services?access_token=mine&f=json"
        #expect(!OAuth2Injection.clientHasToken(pathAndQuery: path, headers: client, placement: .proxyAuthorization))
        #expect(OAuth2Injection.clientHasToken(pathAndQuery: path, headers: client, placement: .header))
        let applied = OAuth2Injection.apply(
            token: "ID.TOKEN.sig", placement: .proxyAuthorization, pathAndQuery: path, headers: client)
        #expect(applied.pathAndQuery == path)
        #expect(applied.headers.values("authorization") == ["Bearer ARCGIS"])
        #expect(applied.headers.values("proxy-authorization") == ["Bearer ID.TOKEN.sig"])
        #expect(applied.headers.first("connection") == "keep-alive")
        var forwarded: [String] = []
        applied.headers.forEachForwardedField { name, value in forwarded.append("\(name): \(value)") }
        #expect(forwarded == ["Authorization: Bearer ARCGIS", "Proxy-Authorization: Bearer ID.TOKEN.sig"])
    }

    @Test func theClientsOwnProxyAuthorizationIsNeverForwarded() {
        var h = HTTPHeaders([("Proxy-Authorization", "Basic dXNlcjpwdw=="), ("Accept", "*/*")])
        var forwarded: [String] = []
        h.forEachForwardedField { name, _ in forwarded.append(name) }
        #expect(forwarded == ["Accept"])
        h.setInjectedProxyAuthorization("Bearer X")
        #expect(h.forwardsProxyAuthorization)
        // Taken out again (a retry without the gateway's token): nothing of it, nor the mark, is left.
        h.remove(name: "proxy-authorization")
        #expect(!h.forwardsProxyAuthorization)
        h.add(name: "Proxy-Authorization", value: "Basic Y2xpZW50")
        forwarded = []
        h.forEachForwardedField { name, _ in forwarded.append(name) }
        #expect(forwarded == ["Accept"])
    }

    // MARK: IAP's rejections

    @Test func iapsRedirectToGoogleSignInIsARejectionOfTheIDToken() {
        let signals: Set<OAuth2Settings.RejectionSignal> = [.iap, .redirectToIssuer]
        func rejects(_ status: Int, _ location: String? = nil, www: [String] = []) -> Bool {
            OAuth2Rejection.isRejection(
                status: status, wwwAuthenticate: www, location: location, signals: signals,
                issuerHost: "oauth2.googleapis.com")
        }
        #expect(rejects(401))  // "Invalid IAP credentials", no WWW-Authenticate
        // The service behind IAP refusing its own credential names its scheme: not the ID token's rejection.
        #expect(!rejects(401, www: [#"Bearer realm="ogc""#]))
        #expect(!rejects(401, www: ["Negotiate", #"Basic realm="arcgis""#]))
        #expect(rejects(302, "https://accounts.google.com/o/oauth2/v2/auth?client_id=x"))
        #expect(!rejects(302, "https://evil.example.com/o/oauth2/v2/auth"))
        #expect(!rejects(302, "https://service.example.com/next"))
        #expect(!rejects(403, www: [#"Bearer error="insufficient_scope""#]))
        #expect(OAuth2Rejection.isSignInHost("accounts.google.com", issuerHost: "oauth2.googleapis.com"))
        #expect(!OAuth2Rejection.isSignInHost("accounts.google.com", issuerHost: "kc.example.com"))
    }
}
