import Testing

@testable import AuthProxyCore

/// The decisions of an `arcgis-token` login: which token service, which lifetime, and when a portal token is
/// exchanged for a federated server's token.
@Suite struct PasswordLoginTests {
    static let server = "https://gis.example.com/arcgis"
    static let portal = "https://gis.example.com/portal"
    static let portalTokens = "https://gis.example.com/portal/sharing/rest/generateToken"

    static func settings(tokenURL: String? = nil, expiration: Int? = nil) -> ArcGISTokenSettings {
        ArcGISTokenSettings(
            username: "u", password: "p", tokenURL: tokenURL, referer: nil, expirationMinutes: expiration,
            client: "requestip")
    }

    @Test func aServerRootAlwaysReadsRestInfoAPortalRootNever() {
        // token_url and expiration_minutes both set do not make rest/info unnecessary: it alone names the
        // portal the server is federated with.
        #expect(PasswordLogin.readsServerInfo(isPortal: false))
        #expect(!PasswordLogin.readsServerInfo(isPortal: true))
    }

    @Test func federatedServerWithTokenURLAndExpirationIsExchanged() throws {
        let info = ServerInfoResponse(
            tokenServicesURL: Self.portalTokens, owningSystemURL: Self.portal, shortLivedTokenValidity: 60)
        let plan = try PasswordLogin.plan(
            Self.settings(tokenURL: Self.portalTokens, expiration: 30), root: Self.server, isPortal: false,
            info: info
        ).get()
        #expect(plan == .init(tokenURL: Self.portalTokens, expirationMinutes: 30, exchangeAt: Self.portal))
    }

    @Test func withoutRestInfoNothingIsExchanged() throws {
        let plan = try PasswordLogin.plan(
            Self.settings(tokenURL: Self.portalTokens, expiration: 30), root: Self.server, isPortal: false, info: nil
        ).get()
        #expect(plan == .init(tokenURL: Self.portalTokens, expirationMinutes: 30, exchangeAt: nil))
    }

    @Test func discoveredTokenServiceAndLifetime() throws {
        let own = Self.server + "/tokens/generateToken"
        let plan = try PasswordLogin.plan(
            Self.settings(), root: Self.server, isPortal: false,
            info: ServerInfoResponse(tokenServicesURL: own, shortLivedTokenValidity: 90)
        ).get()
        #expect(plan == .init(tokenURL: own, expirationMinutes: 90, exchangeAt: nil))
        // Federated, discovered through owningSystemUrl alone.
        let fed = try PasswordLogin.plan(
            Self.settings(), root: Self.server, isPortal: false,
            info: ServerInfoResponse(owningSystemURL: Self.portal + "/")
        ).get()
        #expect(fed == .init(tokenURL: Self.portalTokens, expirationMinutes: nil, exchangeAt: Self.portal))
    }

    @Test func aServerFederatedWithAnotherPortalIsNotExchangedThere() throws {
        let plan = try PasswordLogin.plan(
            Self.settings(tokenURL: Self.portalTokens), root: Self.server, isPortal: false,
            info: ServerInfoResponse(owningSystemURL: "https://other.example.com/portal")
        ).get()
        #expect(plan.exchangeAt == nil)
    }

    @Test func portalRootLogsInAtItsSharingGenerateToken() throws {
        let plan = try PasswordLogin.plan(Self.settings(), root: Self.portal, isPortal: true, info: nil).get()
        #expect(plan == .init(tokenURL: Self.portalTokens, expirationMinutes: nil, exchangeAt: nil))
    }

    @Test func discoveredServiceOnAnotherHostOrOverHTTPIsRefused() {
        for u in ["https://evil.example.com/arcgis/tokens/generateToken", "http://gis.example.com/arcgis/tokens/"] {
            let r = PasswordLogin.plan(
                Self.settings(), root: Self.server, isPortal: false, info: ServerInfoResponse(tokenServicesURL: u))
            #expect(throws: PasswordLogin.PlanError.self) { try r.get() }
        }
        let none = PasswordLogin.plan(Self.settings(), root: Self.server, isPortal: false, info: ServerInfoResponse())
        #expect(throws: PasswordLogin.PlanError.self) { try none.get() }
    }

    @Test func portalRootOfTokenService() {
        #expect(PasswordLogin.portalRoot(ofTokenService: "https://h/Portal/Sharing/Rest/generateToken") == "https://h/Portal")
        #expect(PasswordLogin.portalRoot(ofTokenService: "https://h/arcgis/tokens/generateToken") == nil)
    }
}
