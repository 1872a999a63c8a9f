import Foundation
import Testing

@testable import AuthProxyCore

/// The answers of token services and `rest/info`, in every shape the proxy has to read (the ones real
/// servers send, and the odd ones the earlier `JSONSerialization` parsing tolerated).
@Suite struct TokenResponsesTests {
    typealias GenerateReply = TokenServiceReply<GenerateTokenResponse>
    typealias OAuthReply = TokenServiceReply<OAuthTokenResponse>

    static func decode<T: Decodable>(_ type: T.Type, _ json: String) -> T? {
        try? JSONDecoder().decode(type, from: Data(json.utf8))
    }

    static func refusal(_ json: String) -> TokenServiceRefusal? {
        guard case .refused(let r) = decode(GenerateReply.self, json) else { return nil }
        return r
    }

    // MARK: - generateToken

    struct GenerateCase: Sendable, CustomTestStringConvertible {
        var json: String
        var token: IssuedToken?
        var testDescription: String { json }
    }

    static let now: Int64 = 1_700_000_000_000

    static func issued(_ value: String, expires: Int64?, ssl: Bool = false) -> IssuedToken {
        IssuedToken(value: value, expires: expires, issued: now, ssl: ssl, referer: nil)
    }

    @Test(arguments: [
        GenerateCase(
            json: #"{"token":"t1","expires":1700000060000,"ssl":true}"#,
            token: issued("t1", expires: 1_700_000_060_000, ssl: true)),
        GenerateCase(
            json: #"{"token":"t1","expires":1700000060000,"ssl":false}"#,
            token: issued("t1", expires: 1_700_000_060_000)),
        // Expiry as a fraction (truncated), or in exponent form.
        GenerateCase(
            json: #"{"token":"t1","expires":1700000060000.9}"#, token: issued("t1", expires: 1_700_000_060_000)),
        GenerateCase(json: #"{"token":"t1","expires":1.70000006e12}"#, token: issued("t1", expires: 1_700_000_060_000)),
        // An expiry that is not a number (a string included) means none: the token is used until rejected.
        GenerateCase(json: #"{"token":"t1","expires":"1700000060000"}"#, token: issued("t1", expires: nil)),
        GenerateCase(json: #"{"token":"t1","expires":null}"#, token: issued("t1", expires: nil)),
        GenerateCase(json: #"{"token":"t1"}"#, token: issued("t1", expires: nil)),
        // A flag where a number is expected counts as 1 or 0, as NSNumber did; an expiry before the token
        // arrived (and no Date to correct it) means "lifetime unknown", never "expired on arrival".
        GenerateCase(
            json: #"{"token":"t1","expires":true}"#, token: issued("t1", expires: now + ServerClock.unknownLifetime)),
        // `ssl` as 1/0 counts as a flag; any other value as false.
        GenerateCase(json: #"{"token":"t1","ssl":1}"#, token: issued("t1", expires: nil, ssl: true)),
        GenerateCase(json: #"{"token":"t1","ssl":0}"#, token: issued("t1", expires: nil)),
        GenerateCase(json: #"{"token":"t1","ssl":2}"#, token: issued("t1", expires: nil)),
        GenerateCase(json: #"{"token":"t1","ssl":"true"}"#, token: issued("t1", expires: nil)),
        // No usable token.
        GenerateCase(json: #"{"token":""}"#, token: nil),
        GenerateCase(json: #"{"token":42}"#, token: nil),
        GenerateCase(json: #"{"expires":1700000060000}"#, token: nil),
        GenerateCase(json: #"{"access_token":"a"}"#, token: nil),
        // A trailing comma is tolerated (JSONSerialization read it too).
        GenerateCase(json: #"{"token":"t1",}"#, token: issued("t1", expires: nil)),
    ])
    func generateTokenAnswers(_ c: GenerateCase) throws {
        let reply = try #require(Self.decode(GenerateReply.self, c.json))
        guard case .answered(let body) = reply else {
            Issue.record("read as a refusal: \(reply)")
            return
        }
        #expect(body.issuedToken(at: Self.now) == c.token)
    }

    // MARK: - OAuth

    @Test func oauthAccessTokenExpiresSecondsFromNow() throws {
        let reply = try #require(Self.decode(OAuthReply.self, #"{"access_token":"a1","expires_in":1800,"ssl":true}"#))
        guard case .answered(let body) = reply else {
            Issue.record("read as a refusal: \(reply)")
            return
        }
        #expect(body.issuedToken(at: Self.now) == Self.issued("a1", expires: Self.now + 1_800_000, ssl: true))
    }

    @Test func oauthAnswerWithoutExpiryOrWithAnOddOne() throws {
        for (json, expires) in [
            (#"{"access_token":"a1"}"#, nil),
            (#"{"access_token":"a1","expires_in":"1800"}"#, nil),
            (#"{"access_token":"a1","expires_in":1800.7}"#, Self.now + 1_800_000),
        ] as [(String, Int64?)] {
            let reply = try #require(Self.decode(OAuthReply.self, json))
            guard case .answered(let body) = reply else {
                Issue.record("\(json) read as a refusal")
                continue
            }
            #expect(body.issuedToken(at: Self.now) == Self.issued("a1", expires: expires), "\(json)")
        }
    }

    @Test func oauthAnswerWithoutAccessToken() throws {
        for json in [#"{"token":"t"}"#, #"{"access_token":""}"#, #"{"access_token":null}"#, #"{}"#] {
            let reply = try #require(Self.decode(OAuthReply.self, json))
            guard case .answered(let body) = reply else {
                Issue.record("\(json) read as a refusal")
                continue
            }
            #expect(body.issuedToken(at: Self.now) == nil, "\(json)")
        }
    }

    @Test func authorizationCodeGrantCarriesTheRefreshToken() throws {
        let json = #"""
            {"access_token":"a1","expires_in":30,"username":"alice","ssl":false,
             "refresh_token":"r1","refresh_token_expires_in":600}
            """#
        let body = try #require(Self.decode(OAuthTokenResponse.self, json))
        #expect(
            body
                == OAuthTokenResponse(
                    accessToken: "a1", expiresIn: 30, ssl: false, refreshToken: "r1",
                    refreshTokenExpiresIn: 600, username: "alice"))
    }

    // MARK: - refusals

    struct RefusalCase: Sendable, CustomTestStringConvertible {
        var json: String
        var refusal: TokenServiceRefusal
        /// What the proxy's error message quotes.
        var message: String
        var rejectsToken: Bool
        var testDescription: String { json }
    }

    @Test(arguments: [
        // ArcGIS, wrapped.
        RefusalCase(
            json:
                #"{"error":{"code":400,"message":"Unable to generate token.","details":["Invalid username or password."]}}"#,
            refusal: .init(
                code: 400, messageMember: "Unable to generate token.", details: ["Invalid username or password."]),
            message: "Unable to generate token.", rejectsToken: false),
        RefusalCase(
            json: #"{"error":{"code":498,"message":"Invalid token.","details":[]}}"#,
            refusal: .init(code: 498, messageMember: "Invalid token."), message: "Invalid token.", rejectsToken: true),
        RefusalCase(
            json: #"{"error":{"code":499,"message":"Token Required","messageCode":"GWM_0003","details":[]}}"#,
            refusal: .init(code: 499, messageCode: "GWM_0003", messageMember: "Token Required"),
            message: "Token Required", rejectsToken: true),
        // GWM_0003 whatever the code.
        RefusalCase(
            json: #"{"error":{"code":400,"messageCode":"GWM_0003","message":"Token required"}}"#,
            refusal: .init(code: 400, messageCode: "GWM_0003", messageMember: "Token required"),
            message: "Token required", rejectsToken: true),
        // ArcGIS Server and older releases: unwrapped.
        RefusalCase(
            json: #"{"code":499,"message":"Token Required","messageCode":"GWM_0003","details":[]}"#,
            refusal: .init(code: 499, messageCode: "GWM_0003", messageMember: "Token Required"),
            message: "Token Required", rejectsToken: true),
        RefusalCase(
            json: #"{"code":498,"message":"Invalid Token"}"#,
            refusal: .init(code: 498, messageMember: "Invalid Token"), message: "Invalid Token", rejectsToken: true),
        // A code that is a fraction counts truncated; one that is a string does not count.
        RefusalCase(
            json: #"{"error":{"code":498.0}}"#, refusal: .init(code: 498), message: "error", rejectsToken: true),
        RefusalCase(json: #"{"error":{"code":"498"}}"#, refusal: .init(), message: "error", rejectsToken: false),
        // OAuth inside an ArcGIS error object: `message` first, `error_description` when there is none.
        RefusalCase(
            json:
                #"{"error":{"code":400,"error":"invalid_grant","error_description":"Invalid refresh_token","message":"Invalid refresh_token"}}"#,
            refusal: .init(
                code: 400, messageMember: "Invalid refresh_token", errorDescription: "Invalid refresh_token"),
            message: "Invalid refresh_token", rejectsToken: false),
        RefusalCase(
            json: #"{"error":{"code":400,"error":"invalid_client","error_description":"Invalid client_secret"}}"#,
            refusal: .init(code: 400, errorDescription: "Invalid client_secret"), message: "Invalid client_secret",
            rejectsToken: false),
        // Plain OAuth: the error is a string (and it is the message; a sibling error_description is not read).
        RefusalCase(
            json: #"{"error":"invalid_grant","error_description":"Invalid refresh token"}"#,
            refusal: .init(text: "invalid_grant", isObject: false), message: "invalid_grant", rejectsToken: false),
        // Any other error value is still a refusal.
        RefusalCase(
            json: #"{"error":null,"token":"t1"}"#, refusal: .init(isObject: false), message: "error",
            rejectsToken: false),
        RefusalCase(json: #"{"error":7}"#, refusal: .init(isObject: false), message: "error", rejectsToken: false),
        RefusalCase(json: #"{"error":{}}"#, refusal: .init(), message: "error", rejectsToken: false),
        // Details keep their strings and skip the rest; details that are not a list are none.
        RefusalCase(
            json: #"{"error":{"code":400,"message":"m","details":["a",1,null,{"x":"y"},["z"],"b"]}}"#,
            refusal: .init(code: 400, messageMember: "m", details: ["a", "b"]), message: "m", rejectsToken: false),
        RefusalCase(
            json: #"{"error":{"code":400,"message":"m","details":"a"}}"#,
            refusal: .init(code: 400, messageMember: "m"), message: "m", rejectsToken: false),
        // A message that is not a string does not count.
        RefusalCase(
            json: #"{"error":{"code":400,"message":5,"error_description":"d"}}"#,
            refusal: .init(code: 400, errorDescription: "d"), message: "d", rejectsToken: false),
        // A `code` member of any value makes an answer without token/access_token an unwrapped error.
        RefusalCase(json: #"{"code":null}"#, refusal: .init(), message: "error", rejectsToken: false),
    ])
    func refusals(_ c: RefusalCase) throws {
        let r = try #require(Self.refusal(c.json))
        #expect(r == c.refusal)
        #expect(r.message == c.message)
        #expect(r.rejectsToken == c.rejectsToken)
        // The same rules for OAuth endpoints.
        guard case .refused(let o) = Self.decode(OAuthReply.self, c.json) else {
            Issue.record("not a refusal for an OAuth endpoint")
            return
        }
        #expect(o == c.refusal)
    }

    @Test func aCodeNextToATokenIsNotAnError() throws {
        // A `code` member beside a token is data, not the unwrapped error shape.
        guard case .answered(let g) = Self.decode(GenerateReply.self, #"{"code":498,"token":"t1"}"#) else {
            Issue.record("read as a refusal")
            return
        }
        #expect(g.token == "t1")
        guard case .answered(let o) = Self.decode(OAuthReply.self, #"{"code":498,"access_token":"a1"}"#) else {
            Issue.record("read as a refusal")
            return
        }
        #expect(o.accessToken == "a1")
        // Even when the token member is not a string (it is then no token at all).
        guard case .answered(let n) = Self.decode(GenerateReply.self, #"{"code":498,"token":null}"#) else {
            Issue.record("read as a refusal")
            return
        }
        #expect(n.issuedToken(at: 0) == nil)
    }

    @Test func notAJSONObjectIsNoAnswer() {
        for json in [
            "", "[]", #""token""#, "<html>Invalid Token</html>", #"{"token":"t1"} trailing"#, "{'token':'t1'}",
        ] {
            #expect(Self.decode(GenerateReply.self, json) == nil, "\(json)")
            #expect(Self.decode(OAuthReply.self, json) == nil, "\(json)")
            #expect(Self.decode(ServerInfoResponse.self, json) == nil, "\(json)")
        }
    }

    // MARK: - authproxy login

    static func grant(_ json: String) -> Result<OAuthLogin.Grant, StateError> {
        Result { () throws(StateError) in try OAuthLogin.grant(fromAnswer: Array(json.utf8), status: 200) }
    }

    @Test func loginReadsTheRefreshTokenOfTheCodeGrant() throws {
        let before = nowMillis()
        let g = try Self.grant(
            #"{"access_token":"a1","expires_in":30,"username":"alice","refresh_token":"r1","refresh_token_expires_in":600}"#
        ).get()
        #expect(g.refreshToken == "r1" && g.username == "alice")
        let expires = try #require(g.refreshExpires)
        #expect(expires >= before + 600_000 && expires <= nowMillis() + 600_000)
        // No lifetime: unknown.
        let open = try Self.grant(#"{"refresh_token":"r1","username":7}"#).get()
        #expect(open.refreshExpires == nil && open.username == nil)
    }

    @Test func loginRefusalsAndOddAnswers() {
        func message(_ json: String) -> String? {
            guard case .failure(let e) = Self.grant(json) else { return nil }
            return e.description
        }
        // An error object: its OAuth description first, then its message.
        #expect(
            message(
                #"{"error":{"code":400,"error":"invalid_grant","error_description":"Invalid authorization code","message":"m"}}"#
            )
                == "the portal refused the code: Invalid authorization code")
        #expect(message(#"{"error":{"code":400,"message":"m"}}"#) == "the portal refused the code: m")
        #expect(message(#"{"error":{}}"#) == "the portal refused the code: error")
        // Any other error value is not read as a refusal here: what counts is the refresh token.
        #expect(message(#"{"error":"invalid_grant"}"#) == "the portal returned no refresh_token")
        #expect((try? Self.grant(#"{"error":"x","refresh_token":"r1"}"#).get())?.refreshToken == "r1")
        #expect(message(#"{"refresh_token":5}"#) == "the portal returned no refresh_token")
        #expect(message("<html>") == "the portal answered HTTP 200 without JSON")
    }

    // MARK: - rest/info

    @Test func serverInfoOfAFederatedServer() throws {
        let json = #"""
            {"currentVersion":11.1,"fullVersion":"11.1.0","owningSystemUrl":"https://portal.example.com/portal",
             "authInfo":{"isTokenBasedSecurity":true,"tokenServicesUrl":"https://gis.example.com/portal/sharing/rest/generateToken",
                         "shortLivedTokenValidity":60}}
            """#
        let info = try #require(Self.decode(ServerInfoResponse.self, json))
        #expect(
            info
                == ServerInfoResponse(
                    tokenServicesURL: "https://gis.example.com/portal/sharing/rest/generateToken",
                    owningSystemURL: "https://portal.example.com/portal", shortLivedTokenValidity: 60))
    }

    @Test func serverInfoWithMissingOrOddMembers() throws {
        #expect(Self.decode(ServerInfoResponse.self, #"{"currentVersion":10.9}"#) == ServerInfoResponse())
        #expect(
            Self.decode(ServerInfoResponse.self, #"{"authInfo":"none","owningSystemUrl":5}"#) == ServerInfoResponse())
        #expect(
            Self.decode(
                ServerInfoResponse.self, #"{"authInfo":{"tokenServicesUrl":["x"],"shortLivedTokenValidity":"60"}}"#)
                == ServerInfoResponse())
        #expect(
            Self.decode(ServerInfoResponse.self, #"{"authInfo":{"shortLivedTokenValidity":15.5}}"#)
                == ServerInfoResponse(shortLivedTokenValidity: 15))
    }

    @Test func serverInfoThatIsAnErrorIsNone() {
        #expect(Self.decode(ServerInfoResponse.self, #"{"error":{"code":403,"message":"Access denied"}}"#) == nil)
        #expect(Self.decode(ServerInfoResponse.self, #"{"error":null,"owningSystemUrl":"https://p"}"#) == nil)
        // The unwrapped error shape is not looked for here: a `code` is just another member.
        #expect(
            Self.decode(ServerInfoResponse.self, #"{"code":499,"owningSystemUrl":"https://p"}"#)
                == ServerInfoResponse(owningSystemURL: "https://p"))
    }
}
