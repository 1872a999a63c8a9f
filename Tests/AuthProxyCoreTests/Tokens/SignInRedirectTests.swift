import Testing

@testable import AuthProxyCore

/// A redirect to sign in behind web-tier or SAML authentication is a token rejection; an ordinary redirect is not
/// (issue 36, item 4).
@Suite struct SignInRedirectTests {
    static let request = URLTarget(
        scheme: "https", host: "gis.example.com", port: 443,
        pathAndQuery: "/arcgis/rest/services/Secure/Points/FeatureServer/0/query?where=1%3D1&f=json")

    func classify(_ status: Int, _ location: String?, signInURLs: [String] = [], request: URLTarget = request)
        -> SignInRedirect.Target?
    {
        SignInRedirect.classify(status: status, location: location, request: request, signInURLs: signInURLs)
    }

    @Test(arguments: [
        "https://gis.example.com/portal/sharing/oauth2/authorize?client_id=arcgisonline&response_type=token&redirect_uri=x",
        "https://gis.example.com/portal/sharing/rest/oauth2/authorize?client_id=a",
        "https://gis.example.com/portal/sharing/rest/oauth2/signin?returnUrl=https%3A%2F%2Fgis",
        "https://www.arcgis.com/sharing/oauth2/authorize?client_id=arcgisonline",
        "https://portal.example.org/portal/sharing/oauth2/signin/",
        "/portal/sharing/oauth2/authorize?client_id=arcgisonline",
        "//gis.example.com/portal/sharing/rest/oauth2/signin",
        "HTTPS://GIS.EXAMPLE.COM/Portal/Sharing/OAuth2/Authorize?client_id=x",
    ])
    func thePortalsSignInIsARejection(location: String) {
        for status in [301, 302, 303, 307, 308] {
            #expect(classify(status, location) == .portal)
        }
    }

    @Test func aSAMLRequestIsARejectionWhateverTheHost() {
        #expect(classify(302, "https://idp.example.net/adfs/ls/?SAMLRequest=fZJBT8MwDIX%2F&RelayState=x") == .saml)
        #expect(classify(302, "https://login.example.net/saml2?RelayState=r&SAMLRequest=abc") == .saml)
        #expect(classify(302, "https://login.example.net/saml2?samlrequest=abc") == .saml)
        // Only the parameter, not the text somewhere in a value.
        #expect(classify(302, "https://www.example.net/next?page=SAMLRequest%3D") == nil)
        #expect(classify(302, "https://www.example.net/SAMLRequest=1") == nil)
    }

    @Test func aConfiguredIdentityProviderIsARejection() {
        let idp = ["https://idp.example.com/adfs/ls/", "https://login.example.com/oidc"]
        #expect(classify(302, "https://idp.example.com/adfs/ls/?wa=wsignin1.0", signInURLs: idp) == .configured)
        #expect(classify(302, "https://IDP.example.com:443/adfs/ls/", signInURLs: idp) == .configured)
        #expect(classify(302, "https://login.example.com/oidc/authorize?x=1", signInURLs: idp) == .configured)
        #expect(classify(302, "https://login.example.com/oidc?x=1", signInURLs: idp) == .configured)
        // A segment boundary: /oidcx is another path.
        #expect(classify(302, "https://login.example.com/oidcx", signInURLs: idp) == nil)
        #expect(classify(302, "http://idp.example.com/adfs/ls/", signInURLs: idp) == nil)
        #expect(classify(302, "https://idp.example.com/adfs/ls/", signInURLs: []) == nil)
    }

    @Test func ordinaryRedirectsAreNot() {
        // http → https, a moved service, a folder's trailing slash, the portal's home page.
        #expect(
            classify(301, "https://gis.example.com/arcgis/rest/services/Secure/Points/FeatureServer/0/query") == nil)
        #expect(
            classify(301, "https://gis.example.com/arcgis/rest/services/Moved/Points/FeatureServer/0/query?f=json")
                == nil)
        #expect(classify(302, "/arcgis/rest/services/") == nil)
        #expect(classify(302, "https://gis.example.com/portal/home/") == nil)
        #expect(classify(302, "https://gis.example.com/portal/sharing/rest/oauth2/token") == nil)
        // Sign-in paths only as the path's end, not inside a query value.
        #expect(classify(302, "https://gis.example.com/next?u=/sharing/oauth2/authorize") == nil)
    }

    @Test func onlyRedirectStatusesWithALocation() {
        let signIn = "https://gis.example.com/portal/sharing/oauth2/authorize?client_id=x"
        for status in [200, 300, 304, 305, 401, 403, 498] {
            #expect(classify(status, signIn) == nil)
        }
        #expect(classify(302, nil) == nil)
        #expect(classify(302, "") == nil)
    }

    @Test func aSignInGoingThroughTheProxyIsNotItsOwnRejection() {
        // A client signing in through the proxy: the authorize endpoint's redirect onwards (to the IdP) is its flow.
        let authorize = URLTarget(
            scheme: "https", host: "gis.example.com", port: 443,
            pathAndQuery: "/portal/sharing/oauth2/authorize?client_id=app&response_type=code&redirect_uri=x")
        #expect(classify(302, "https://idp.example.net/adfs/ls/?SAMLRequest=abc", request: authorize) == nil)
        #expect(classify(302, "https://gis.example.com/portal/sharing/oauth2/signin", request: authorize) == nil)
    }

    @Test func signInURLsAreReadForTheKindsAWebTierGuards() throws {
        let loader = ConfigLoader(environment: [:])
        let c = try loader.parse(
            """
            [[credential]]
            name = "web"
            type = "oauth-user"
            client_id = "id"
            portal_url = "https://gis.example.com/portal"
            redirect_uri = "urn:ietf:wg:oauth:2.0:oob"
            match = "https://gis.example.com/"
            sign_in_urls = ["https://idp.example.com/adfs/ls/"]
            """)
        #expect((c.credentials[0].kind as? OAuthUserSettings)?.signInURLs == ["https://idp.example.com/adfs/ls/"])
        #expect(throws: ConfigError.self) {
            try loader.parse(
                """
                [[credential]]
                name = "k"
                type = "api-key"
                key = "k"
                match = "https://gis.example.com/"
                sign_in_urls = ["https://idp.example.com/adfs/ls/"]
                """)
        }
        #expect(throws: ConfigError.self) {
            try loader.parse(
                """
                [[credential]]
                name = "g"
                type = "arcgis-token"
                username = "u"
                password = "p"
                match = "https://gis.example.com/arcgis"
                sign_in_urls = ["idp.example.com/adfs"]
                """)
        }
    }
}
