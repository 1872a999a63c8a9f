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
        #expect(plan == .exchange(portal: Self.portal))
    }

    @Test func withoutRestInfoNothingIsExchanged() throws {
        let plan = try PasswordLogin.plan(
            Self.settings(tokenURL: Self.portalTokens, expiration: 30), root: Self.server, isPortal: false, info: nil
        ).get()
        #expect(plan == .login(tokenURL: Self.portalTokens, expirationMinutes: 30))
    }

    @Test func discoveredTokenServiceAndLifetime() throws {
        let own = Self.server + "/tokens/generateToken"
        let plan = try PasswordLogin.plan(
            Self.settings(), root: Self.server, isPortal: false,
            info: ServerInfoResponse(tokenServicesURL: own, shortLivedTokenValidity: 90)
        ).get()
        #expect(plan == .login(tokenURL: own, expirationMinutes: 90))
        // Federated, discovered through owningSystemUrl alone.
        let fed = try PasswordLogin.plan(
            Self.settings(), root: Self.server, isPortal: false,
            info: ServerInfoResponse(owningSystemURL: Self.portal + "/")
        ).get()
        #expect(fed == .exchange(portal: Self.portal))
    }

    @Test func aServerFederatedWithAnotherPortalIsNotExchangedThere() throws {
        let plan = try PasswordLogin.plan(
            Self.settings(tokenURL: Self.portalTokens), root: Self.server, isPortal: false,
            info: ServerInfoResponse(owningSystemURL: "https://other.example.com/portal")
        ).get()
        #expect(plan == .login(tokenURL: Self.portalTokens, expirationMinutes: nil))
    }

    /// Every server federated with the portal is served by the portal's one token (one password login):
    /// the plan for each server root is an exchange, and only the portal root logs in.
    @Test func federatedServersShareThePortalsLogin() throws {
        for server in [
            "https://gis.example.com/arcgis", "https://gis.example.com/hosting", "https://gis.example.com/image",
        ] {
            let plan = try PasswordLogin.plan(
                Self.settings(), root: server, isPortal: false, info: ServerInfoResponse(owningSystemURL: Self.portal)
            ).get()
            #expect(plan == .exchange(portal: Self.portal), "\(server)")
        }
        let portal = try PasswordLogin.plan(Self.settings(expiration: 30), root: Self.portal, isPortal: true, info: nil)
            .get()
        #expect(portal == .login(tokenURL: Self.portalTokens, expirationMinutes: 30))
    }

    @Test func portalRootLogsInAtItsSharingGenerateToken() throws {
        let plan = try PasswordLogin.plan(Self.settings(), root: Self.portal, isPortal: true, info: nil).get()
        #expect(plan == .login(tokenURL: Self.portalTokens, expirationMinutes: nil))
    }

    @Test func discoveredServiceOnAnotherHostPortOrOverHTTPIsRefused() {
        for u in [
            "https://evil.example.com/arcgis/tokens/generateToken", "http://gis.example.com/arcgis/tokens/",
            "https://gis.example.com:37767/arcgis/tokens/generateToken",
        ] {
            let r = PasswordLogin.plan(
                Self.settings(), root: Self.server, isPortal: false, info: ServerInfoResponse(tokenServicesURL: u))
            #expect(throws: PasswordLogin.PlanError.self) { try r.get() }
        }
        let none = PasswordLogin.plan(Self.settings(), root: Self.server, isPortal: false, info: ServerInfoResponse())
        #expect(throws: PasswordLogin.PlanError.self) { try none.get() }
    }

    /// A server federated with a portal on another port of its host (owningSystemUrl): the portal would get the
    /// password, so it must be on the server's origin or configured; the message names the root, the URL and why.
    @Test func aFederatedPortalOnAnotherPortMustBeConfigured() throws {
        let server = "https://gis.example.com:6443/arcgis"
        let portal = "https://gis.example.com:7443/arcgis"
        let info = ServerInfoResponse(owningSystemURL: portal)
        let refused = PasswordLogin.plan(Self.settings(), root: server, isPortal: false, info: info)
        guard case .failure(let e) = refused else {
            Issue.record("planned \(refused)")
            return
        }
        #expect(e.message.contains(server + "/rest/info"), "\(e.message)")
        #expect(e.message.contains(portal + "/sharing/rest/generateToken"), "\(e.message)")
        #expect(e.message.contains("owningSystemUrl") && e.message.contains("token_url"), "\(e.message)")
        // Listed as a match prefix of the credential, the portal is trusted.
        let configured: Set<TokenServiceTrust.Origin> = [.init(scheme: "https", host: "gis.example.com", port: 7443)]
        let plan = try PasswordLogin.plan(
            Self.settings(), root: server, isPortal: false, info: info, configured: configured
        ).get()
        #expect(plan == .exchange(portal: portal))
        // So is it with token_url.
        let withURL = try PasswordLogin.plan(
            Self.settings(tokenURL: portal + "/sharing/rest/generateToken"), root: server, isPortal: false, info: info
        ).get()
        #expect(withURL == .exchange(portal: portal))
    }

    @Test func portalRootOfTokenService() {
        #expect(
            PasswordLogin.portalRoot(ofTokenService: "https://h/Portal/Sharing/Rest/generateToken")
                == "https://h/Portal")
        #expect(PasswordLogin.portalRoot(ofTokenService: "https://h/arcgis/tokens/generateToken") == nil)
    }
}
