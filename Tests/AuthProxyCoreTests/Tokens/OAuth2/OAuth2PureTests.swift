import Foundation
import Testing

@testable import AuthProxyCore

/// Discovery, token requests, token answers, rejection and injection of `oauth2` credentials: tables, no sockets.
@Suite struct OAuth2PureTests {
    static let issuer = "https://idp.example.com/realms/gis"

    static func doc(_ members: [String: Any]) -> [UInt8] {
        Array(try! JSONSerialization.data(withJSONObject: members))
    }

    @Test func discoveryChecksTheIssuerExactly() throws {
        let ok = OAuth2Discovery.parse(
            Self.doc([
                "issuer": Self.issuer, "token_endpoint": Self.issuer + "/token",
                "token_endpoint_auth_methods_supported": ["private_key_jwt", "client_secret_basic"],
                "mtls_endpoint_aliases": ["token_endpoint": "https://mtls.idp.example.com/token"],
            ]), configuredIssuer: Self.issuer)
        let d = try ok.get()
        #expect(
            d.tokenEndpoint == Self.issuer + "/token" && d.mtlsTokenEndpoint == "https://mtls.idp.example.com/token")
        #expect(d.authMethodsSupported == ["private_key_jwt", "client_secret_basic"])
        for other in [Self.issuer + "/", "https://IDP.example.com/realms/gis", "https://evil.example.com/realms/gis"] {
            let r = OAuth2Discovery.parse(
                Self.doc(["issuer": other, "token_endpoint": Self.issuer + "/token"]), configuredIssuer: Self.issuer)
            guard case .failure(let why) = r else {
                Issue.record("accepted issuer \(other)")
                continue
            }
            #expect(why.message.contains("must be equal exactly"))
        }
        let plain = OAuth2Discovery.parse(
            Self.doc(["issuer": Self.issuer, "token_endpoint": "http://idp.example.com/token"]),
            configuredIssuer: Self.issuer)
        #expect((try? plain.get()) == nil)
        #expect((try? OAuth2Discovery.parse(Array("<html>".utf8), configuredIssuer: Self.issuer).get()) == nil)
        #expect(
            OAuth2Discovery.documentURL(issuer: Self.issuer + "/") == Self.issuer + "/.well-known/openid-configuration")
    }

    /// Mutual TLS needs TLS: an http mTLS alias would carry the token request (and the token back) in clear, with
    /// no client certificate — refused for an https issuer and for an http one, naming the field.
    @Test(arguments: [issuer, "http://idp.example.com/realms/gis"])
    func anHTTPMutualTLSAliasIsRefused(issuer: String) {
        let r = OAuth2Discovery.parse(
            Self.doc([
                "issuer": issuer, "token_endpoint": issuer + "/token",
                "mtls_endpoint_aliases": ["token_endpoint": "http://mtls.idp.example.com/token?x=1"],
            ]), configuredIssuer: issuer)
        guard case .failure(let why) = r else {
            Issue.record("accepted an http mTLS alias")
            return
        }
        #expect(why.message.contains("mtls_endpoint_aliases.token_endpoint"), "\(why.message)")
        #expect(why.message.contains("http://mtls.idp.example.com/token") && !why.message.contains("x=1"))
        // An https alias with an http issuer is fine (the alias is what carries the request).
        let ok = OAuth2Discovery.parse(
            Self.doc([
                "issuer": issuer, "token_endpoint": issuer + "/token",
                "mtls_endpoint_aliases": ["token_endpoint": "https://mtls.idp.example.com/token"],
            ]), configuredIssuer: issuer)
        #expect((try? ok.get())?.mtlsTokenEndpoint == "https://mtls.idp.example.com/token")
    }

    @Test(
        arguments: [
            // configured wins; else the best the provider supports among what the configuration can do
            (
                OAuth2Settings.AuthMethod?.some(.clientSecretPost), ["private_key_jwt"], true, false,
                "client_secret_post"
            ),
            (nil, ["client_secret_post", "client_secret_basic"], true, false, "client_secret_basic"),
            (nil, ["client_secret_post"], true, false, "client_secret_post"),
            (nil, ["client_secret_basic", "private_key_jwt"], true, true, "private_key_jwt"),
            (nil, ["client_secret_basic"], false, true, "refused"),
            (nil, nil, true, false, "client_secret_basic"),
            (nil, nil, false, true, "private_key_jwt"),
            (nil, ["none"], false, false, "none"),
        ] as [(OAuth2Settings.AuthMethod?, [String]?, Bool, Bool, String)])
    func authMethodChoice(
        _ configured: OAuth2Settings.AuthMethod?, _ supported: [String]?, _ secret: Bool, _ assertion: Bool,
        _ expected: String
    ) {
        let r = OAuth2Discovery.authMethod(
            configured: configured, supported: supported, hasSecret: secret, hasAssertion: assertion)
        switch r {
        case .success(let m): #expect(m.rawValue == expected)
        case .failure: #expect(expected == "refused")
        }
    }

    static func settings(_ grant: OAuth2Settings.Grant = .clientCredentials) -> OAuth2Settings {
        var s = OAuth2Settings(endpoint: .issuer(issuer), clientID: "app:1")
        s.clientSecret = "p@ss:w/rd"
        s.scope = "api://x/.default"
        s.grant = grant
        return s
    }

    @Test func tokenRequestPerMethod() {
        let s = Self.settings()
        let basic = OAuth2TokenRequest.make(s, method: .clientSecretBasic, proof: .settings, refreshToken: nil)
        #expect(basic.fields.map { "\($0.0)=\($0.1)" } == ["grant_type=client_credentials", "scope=api://x/.default"])
        // RFC 6749 §2.3.1: form-encoded, then joined and base64-encoded.
        let decoded = String(decoding: Data(base64Encoded: String(basic.headers[0].1.dropFirst(6)))!, as: UTF8.self)
        #expect(basic.headers[0].0 == "Authorization" && decoded == "app%3A1:p%40ss%3Aw%2Frd")
        let post = OAuth2TokenRequest.make(s, method: .clientSecretPost, proof: .settings, refreshToken: nil)
        #expect(post.headers.isEmpty)
        #expect(post.fields.map(\.0) == ["grant_type", "scope", "client_id", "client_secret"])
        let jwt = OAuth2TokenRequest.make(s, method: .privateKeyJWT, proof: .assertion("a.b.c"), refreshToken: nil)
        #expect(
            jwt.fields.map { "\($0.0)=\($0.1)" }.suffix(3) == [
                "client_id=app:1",
                "client_assertion_type=urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
                "client_assertion=a.b.c",
            ])
        #expect(!jwt.fields.contains { $0.0 == "client_secret" })
        var r = Self.settings(.refreshToken)
        r.audience = "aud"
        r.resource = "https://ogc.example.com/"
        let refresh = OAuth2TokenRequest.make(r, method: .none, proof: .settings, refreshToken: "RT")
        #expect(
            refresh.fields.map { "\($0.0)=\($0.1)" } == [
                "grant_type=refresh_token", "refresh_token=RT",
                "scope=api://x/.default", "audience=aud", "resource=https://ogc.example.com/", "client_id=app:1",
            ])
    }

    static func jwt(exp: Int64) -> String {
        "eyJhbGciOiJIUzI1NiJ9." + Base64URL.encode(Array("{\"exp\":\(exp)}".utf8)) + ".sig"
    }

    @Test func tokenAnswers() {
        let now: Int64 = 1_700_000_000_000
        func classify(_ status: Int, _ body: String) -> OAuth2TokenAnswer {
            OAuth2TokenAnswer.classify(status: status, body: Array(body.utf8), now: now, defaultLifetimeSeconds: 300)
        }
        func expires(_ a: OAuth2TokenAnswer) -> Int64? {
            if case .token(let t, _) = a { return t.expires.map { $0 - now } }
            return nil
        }
        #expect(expires(classify(200, #"{"access_token":"A","token_type":"Bearer","expires_in":3600}"#)) == 3_600_000)
        #expect(expires(classify(200, #"{"access_token":"A","expires_in":"60"}"#)) == 60_000)
        #expect(expires(classify(200, #"{"access_token":"\#(Self.jwt(exp: now / 1000 + 120))"}"#)) == 120_000)
        #expect(expires(classify(200, #"{"access_token":"opaque"}"#)) == 300_000)
        #expect(
            classify(200, #"{"access_token":"A","refresh_token":"R2","expires_in":60}"#)
                == .token(
                    IssuedToken(value: "A", expires: now + 60_000, issued: now, ssl: false, referer: nil),
                    refreshToken: "R2"))
        #expect(
            classify(401, #"{"error":"invalid_client","error_description":"bad secret"}"#)
                == .refused(error: "invalid_client", description: "bad secret"))
        #expect(classify(400, #"{"error":"invalid_grant"}"#) == .refused(error: "invalid_grant", description: nil))
        #expect(classify(200, #"{"access_token":"A","token_type":"DPoP"}"#).isRefused)
        for (status, body) in [
            (200, ""), (200, "  \n"), (200, "<html>"), (503, "<html>busy</html>"), (429, #"{"error":"slow_down"}"#),
            (503, #"{"error":"invalid_client"}"#), (400, #"{"error":"temporarily_unavailable"}"#),
            (200, #"{"token":"x"}"#),
            (200, #"{"access_token":"A","expires_in":0}"#),
            (200, #"{"access_token":"\#(Self.jwt(exp: now / 1000 - 5))"}"#),
            (500, #"{"access_token":"A"}"#),
        ] {
            guard case .outage = classify(status, body) else {
                Issue.record("not an outage: \(status) \(body)")
                continue
            }
        }
        #expect(OAuth2TokenAnswer.jwtExpiry("a.b") == nil && OAuth2TokenAnswer.jwtExpiry("x.!!.y") == nil)
    }

    @Test(
        arguments: [
            (401, ["Bearer realm=\"x\", error=\"invalid_token\""], nil as String?, "default", true),
            (401, ["Bearer realm=\"x\""], nil, "default", false),
            (401, ["Basic realm=\"x\""], nil, "default", false),
            (401, ["Basic realm=\"x\""], nil, "401", true),
            (403, ["Bearer error=\"insufficient_scope\", scope=\"w\""], nil, "403", false),
            (403, ["Bearer error=\"invalid_token\""], nil, "403", true),
            (403, [], nil, "default", false),
            (302, [], "https://idp.example.com/realms/gis/protocol/openid-connect/auth?x=1", "redirect", true),
            (302, [], "https://IDP.example.com/login", "redirect", true),
            (302, [], "https://ogc.example.com/next", "redirect", false),
            (302, [], "https://idp.example.com/login", "default", false),
            (200, [], nil, "401", false),
        ] as [(Int, [String], String?, String, Bool)])
    func rejection(_ status: Int, _ challenges: [String], _ location: String?, _ setting: String, _ expected: Bool) {
        let signals: Set<OAuth2Settings.RejectionSignal> =
            switch setting {
            case "401": [.anyUnauthorized]
            case "403": [.invalidToken, .status(403)]
            case "redirect": [.redirectToIssuer]
            default: [.invalidToken]
            }
        #expect(
            OAuth2Rejection.isRejection(
                status: status, wwwAuthenticate: challenges, location: location, signals: signals,
                issuerHost: "idp.example.com") == expected)
    }

    static func headers(_ fields: [(String, String)]) -> HTTPHeaders { HTTPHeaders(fields) }

    @Test func injection() {
        let header = OAuth2Injection.apply(
            token: "T+1", placement: .header, pathAndQuery: "/ogc/items?f=json",
            headers: Self.headers([("Authorization", "Basic x"), ("Accept", "*/*")]))
        #expect(header.pathAndQuery == "/ogc/items?f=json")
        #expect(header.headers.values("authorization") == ["Bearer T+1"])
        let query = OAuth2Injection.apply(
            token: "T+1", placement: .query, pathAndQuery: "/ogc/items?access_token=old&f=json&%61ccess_token=x",
            headers: Self.headers([("Authorization", "Bearer mine")]))
        #expect(query.pathAndQuery == "/ogc/items?f=json&access_token=T%2B1")
        #expect(query.headers.values("authorization").isEmpty)
        #expect(
            OAuth2Injection.apply(token: "T", placement: .query, pathAndQuery: "/a", headers: Self.headers([]))
                .pathAndQuery == "/a?access_token=T")
        #expect(
            OAuth2Injection.clientHasToken(pathAndQuery: "/a", headers: Self.headers([("Authorization", "Basic dTpw")]))
        )
        #expect(OAuth2Injection.clientHasToken(pathAndQuery: "/a?access_token=x", headers: Self.headers([])))
        #expect(
            !OAuth2Injection.clientHasToken(
                pathAndQuery: "/a?access_token=", headers: Self.headers([("Authorization", "Bearer ")])))
        #expect(
            !OAuth2Injection.clientHasToken(
                pathAndQuery: "/a?token=x", headers: Self.headers([("X-Esri-Authorization", "Bearer t")])))
    }
}

extension OAuth2TokenAnswer {
    var isRefused: Bool {
        if case .refused = self { return true }
        return false
    }
}

/// `authproxy login` for an `oauth2` credential, without a provider: the authorize URL and the code exchange's form.
@Suite struct OAuth2LoginTests {
    @Test func authorizeURLCarriesPKCEAndTheCodeExchangeItsVerifier() throws {
        let c = try ConfigLoader(environment: [:]).parse(
            """
            [[credential]]
            name = "desk"
            type = "oauth2"
            token_url = "https://idp.example.com/oauth2/token"
            authorization_url = "https://idp.example.com/oauth2/authorize?prompt=login"
            client_id = "d"
            token_endpoint_auth_method = "none"
            grant = "authorization_code"
            redirect_uri = "http://127.0.0.1:7777/callback"
            scope = "openid offline_access"
            match = ["https://ogc.example.com/"]
            """
        ).credentials[0]
        let login = try OAuth2Login(credential: c, fetch: SyncFetch(timeoutSeconds: 1))
        #expect(login.loopbackPort == 7777)
        let url = login.authorizeURL
        #expect(url.hasPrefix("https://idp.example.com/oauth2/authorize?prompt=login&response_type=code&client_id=d&"))
        #expect(
            url.contains("redirect_uri=http%3A%2F%2F127.0.0.1%3A7777%2Fcallback")
                && url.contains("scope=openid%20offline_access"))
        #expect(url.contains("code_challenge=\(login.challenge)&code_challenge_method=S256"))
        #expect(login.challenge == Base64URL.encode(Crypto.sha256(Array(login.verifier.utf8))))
        let state = try #require(url.split(separator: "&").first { $0.hasPrefix("state=") }).dropFirst(6)
        #expect(try login.code(fromCallback: "/callback?code=abc&state=\(state)") == "abc")
        #expect(throws: StateError.self) { try login.code(fromCallback: "/callback?code=abc&state=other") }
        let form = OAuth2TokenRequest.make(
            c.oauth2!, method: .none, proof: .settings,
            grant: .code("abc", redirectURI: "http://127.0.0.1:7777/callback", verifier: login.verifier))
        #expect(form.fields.map(\.0) == ["grant_type", "code", "redirect_uri", "code_verifier", "scope", "client_id"])
        #expect(form.fields[0].1 == "authorization_code")
    }
}

/// One token per `oauth2` credential, whatever host it goes to, under a key of its own.
@Suite struct OAuth2KeyTests {
    @Test func oneKeyPerCredentialNamedAfterTheProvider() throws {
        let c = try ConfigLoader(environment: [:]).parse(
            """
            [[credential]]
            name = "kc"
            type = "oauth2"
            issuer = "https://kc.example.com/realms/gis"
            client_id = "c"
            client_secret = "s"
            match = ["https://ogc.example.com/", "https://*.geo.example.com/"]
            """
        ).credentials[0]
        let a = try #require(HTTPURL.parse("https://ogc.example.com/arcgis/rest/services/x")).target
        let b = try #require(HTTPURL.parse("https://wms.geo.example.com/geoserver/wms")).target
        #expect(TokenService.key(for: c, target: a) == TokenService.key(for: c, target: b))
        #expect(TokenService.key(for: c, target: a) == "kc|https://kc.example.com/realms/gis")
        #expect(TokenService.prefetchTargets(c).count == 1)
    }
}
