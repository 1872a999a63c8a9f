import Testing

@testable import AuthProxyCore

/// Findings for `url` as a probe would make them; the tests fill in what each scenario's server said.
func doctorFindings(_ url: String) -> DoctorFindings {
    DoctorFindings(target: HTTPURL.parse(url)!.target)
}

func doctorResponse(_ status: Int, challenges: String? = nil, body: String = "", contentType: String = "text/plain")
    -> DoctorFindings.Response
{
    DoctorFindings.Response(
        status: status, contentType: contentType,
        challenges: challenges.map { AuthChallenge.parse($0) } ?? [],
        arcgisError: ArcGISErrorBody.read(status: status, contentType: contentType, body: Array(body.utf8)))
}

func doctorInfo(_ url: String, _ info: RestInfo) -> DoctorFindings.InfoProbe {
    DoctorFindings.InfoProbe(url: url, status: 200, reading: .info(info))
}

let tokenRequiredBody = #"{"error":{"code":499,"message":"Token Required","messageCode":"GWM_0003","details":[]}}"#

@Suite struct DoctorCredentialAdvisorTests {
    private func active(_ a: CredentialAdvisor.Advice) -> [CredentialSuggestion] {
        a.suggestions.filter { !$0.isAlternative }
    }

    private func field(_ s: CredentialSuggestion, _ key: String) -> CredentialSuggestion.Field? {
        s.fields.first { $0.key == key }
    }

    @Test func standaloneTokenServer() {
        var f = doctorFindings("https://gis.example.com/arcgis/rest/services/Roads/FeatureServer/0/query?token=x")
        f.restInfo = doctorInfo(
            "https://gis.example.com/arcgis/rest/info",
            RestInfo(
                isTokenBasedSecurity: true,
                tokenServicesURL: "https://gis.example.com/arcgis/tokens/generateToken", shortLivedTokenValidity: 60))
        f.response = doctorResponse(200, body: tokenRequiredBody)
        let a = CredentialAdvisor.advise(f)
        #expect(a.suggestions.map(\.type) == ["arcgis-token"])
        let s = a.suggestions[0]
        #expect(s.match == ["https://gis.example.com/arcgis"])
        #expect(field(s, "token_url")?.value == .string("https://gis.example.com/arcgis/tokens/generateToken"))
        #expect(field(s, "username")?.value == .string("REPLACE_ME"))
        #expect(s.environmentVariables == ["AUTHPROXY_GIS_EXAMPLE_COM_ARCGIS_PASSWORD"])
        #expect(!s.isAlternative)
    }

    @Test func federatedServerGetsPortalTokens() {
        var f = doctorFindings("https://gis.example.com/server/rest/services/X/MapServer")
        f.restInfo = doctorInfo(
            "https://gis.example.com/server/rest/info",
            RestInfo(
                owningSystemURL: "https://gis.example.com/portal/",
                isTokenBasedSecurity: true,
                tokenServicesURL: "https://gis.example.com/portal/sharing/rest/generateToken"))
        f.portalInfo = doctorInfo(
            "https://gis.example.com/portal/sharing/rest/info",
            RestInfo(
                isTokenBasedSecurity: true,
                tokenServicesURL: "https://gis.example.com/portal/sharing/rest/generateToken"))
        f.response = doctorResponse(499, body: tokenRequiredBody)
        let a = CredentialAdvisor.advise(f)
        #expect(a.suggestions.map(\.type) == ["arcgis-token", "oauth-app"])
        #expect(active(a).map(\.type) == ["arcgis-token"])
        let token = a.suggestions[0]
        #expect(token.match == ["https://gis.example.com/server", "https://gis.example.com/portal"])
        #expect(
            field(token, "token_url")?.value == .string("https://gis.example.com/portal/sharing/rest/generateToken"))
        #expect(token.reasons[0].contains("federated with the portal https://gis.example.com/portal"))
        let oauth = a.suggestions[1]
        #expect(oauth.isAlternative)
        #expect(field(oauth, "portal_url")?.value == .string("https://gis.example.com/portal"))
    }

    @Test func portalURL() {
        var f = doctorFindings("https://www.example.com/gis/sharing/rest/content/items/abc?f=json")
        f.restInfo = doctorInfo("https://www.example.com/gis/sharing/rest/info", RestInfo(isTokenBasedSecurity: true))
        f.response = doctorResponse(200, body: tokenRequiredBody)
        let a = CredentialAdvisor.advise(f)
        #expect(active(a).map(\.type) == ["arcgis-token"])
        #expect(a.suggestions[0].match == ["https://www.example.com/gis"])
        #expect(
            field(a.suggestions[0], "token_url")?.value
                == .string("https://www.example.com/gis/sharing/rest/generateToken"))
        #expect(a.suggestions.last.flatMap { field($0, "portal_url") }?.value == .string("https://www.example.com/gis"))
    }

    @Test func publicResourceOnATokenServerIsOnlyProposedCommentedOut() {
        var f = doctorFindings("https://gis.example.com/arcgis/rest/services/Public/Roads/MapServer")
        f.restInfo = doctorInfo(
            "https://gis.example.com/arcgis/rest/info",
            RestInfo(
                isTokenBasedSecurity: true,
                tokenServicesURL: "https://gis.example.com/arcgis/tokens/generateToken"))
        f.response = doctorResponse(200, body: #"{"currentVersion":11.1,"layers":[]}"#)
        let a = CredentialAdvisor.advise(f)
        #expect(a.suggestions.map(\.type) == ["arcgis-token"])
        #expect(active(a).isEmpty)
        #expect(a.notes.contains { $0.contains("public resource") })
    }

    @Test func tokenRequiredWithoutRestInfoLeavesTheTokenServiceOpen() {
        var f = doctorFindings("https://h/arcgis/rest/services/S/FeatureServer")
        f.restInfo = DoctorFindings.InfoProbe(url: "https://h/arcgis/rest/info", status: 404, reading: .notArcGIS)
        f.response = doctorResponse(200, body: tokenRequiredBody)
        let s = CredentialAdvisor.advise(f).suggestions
        #expect(s.map(\.type) == ["arcgis-token"])
        #expect(field(s[0], "token_url")?.commentedOut == true)
    }

    @Test func noTokenBasedSecurityNoChallengeNeedsNothing() {
        var f = doctorFindings("http://h/arcgis/rest/services")
        f.restInfo = doctorInfo(
            "http://h/arcgis/rest/info", RestInfo(currentVersion: "11.1", isTokenBasedSecurity: false))
        f.response = doctorResponse(200, body: "{}")
        let a = CredentialAdvisor.advise(f)
        #expect(a.suggestions.isEmpty)
        #expect(a.notes.isEmpty)
    }

    @Test(arguments: [
        ("http://h/data", #"Basic realm="r""#, ["basic"], true, "http://h", "H"),
        ("https://h/data", #"Basic realm="r""#, ["basic"], false, "https://h", "H"),
        (
            "http://h/wms/service?x=1", #"Basic realm="r", Digest realm="r", nonce="n""#, ["basic", "digest"], false,
            "http://h/wms", "H_WMS"
        ),
        ("http://h:8080/arcgis/rest/services", "NTLM", ["ntlm"], false, "http://h:8080/arcgis", "H_8080"),
    ])
    func passwordSchemes(
        _ url: String, _ offer: String, _ schemes: [String], _ allowBasic: Bool, _ match: String, _ place: String
    ) {
        var f = doctorFindings(url)
        f.response = doctorResponse(401, challenges: offer, contentType: "text/html")
        let s = CredentialAdvisor.advise(f).suggestions
        #expect(s.map(\.type) == ["password"])
        #expect(field(s[0], "schemes")?.value == .strings(schemes))
        #expect((field(s[0], "allow_basic_over_http") != nil) == allowBasic)
        #expect(s[0].match == [match])
        // Named after host, port and scope: two services behind one host name do not share a secret variable.
        #expect(s[0].environmentVariables == ["AUTHPROXY_\(place)_PASSWORD"])
    }

    @Test func namesDifferPerServiceAndNeverRepeatTheConfigs() {
        var server = doctorFindings("https://h/server/rest/services/A/MapServer")
        server.response = doctorResponse(401, challenges: #"Basic realm="r""#, contentType: "text/html")
        var portal = doctorFindings("https://h/portal/sharing/rest/portals/self")
        portal.response = server.response
        let a = CredentialAdvisor.advise(server).suggestions
        let b = CredentialAdvisor.advise(portal).suggestions
        #expect(a.map(\.name) == ["h-server-password"])
        #expect(b.map(\.name) == ["h-portal-password"])
        #expect(a[0].environmentVariables != b[0].environmentVariables)
        // Appended to a proxy.conf that already has that name (another run of doctor for the same scope).
        server.takenNames = ["h-server-password", "h-server-password-2"]
        #expect(CredentialAdvisor.advise(server).suggestions.map(\.name) == ["h-server-password-3"])
    }

    @Test func iisOffersNegotiateAndNTLM() {
        var f = doctorFindings("https://iis.corp/arcgis/rest/services")
        f.response = DoctorFindings.Response(
            status: 401, contentType: "text/html",
            challenges: AuthChallenge.parse(fields: ["Negotiate", "NTLM"]))
        let a = CredentialAdvisor.advise(f)
        #expect(a.suggestions.map(\.type) == ["password", "kerberos"])
        #expect(active(a).map(\.type) == ["password"])
        #expect(field(a.suggestions[0], "schemes")?.value == .strings(["ntlm"]))
        #expect(field(a.suggestions[0], "domain")?.commentedOut == true)
    }

    /// A Windows login over https may be bound to the server certificate (IIS Extended Protection): doctor says
    /// interception breaks it and how to keep the host a blind tunnel; over http, and for Basic, it says nothing.
    @Test(arguments: [
        ("https://iis.corp/arcgis/rest/services", "NTLM", true),
        ("https://iis.corp:8443/arcgis/rest/services", "Negotiate", true),
        ("https://iis.corp/arcgis/rest/services", "Basic realm=\"r\"", false),
        ("http://iis.corp/arcgis/rest/services", "NTLM", false),
    ])
    func windowsLoginsOverHTTPSWarnAboutInterception(_ url: String, _ challenge: String, _ warned: Bool) {
        var f = doctorFindings(url)
        f.response = doctorResponse(401, challenges: challenge)
        let notes = CredentialAdvisor.advise(f).notes.filter { $0.contains("Extended Protection") }
        #expect(notes.count == (warned ? 1 : 0))
        if warned {
            #expect(notes[0].contains("intercept = false"))
            #expect(notes[0].contains("[tls] no_intercept = [\"\(f.originPlace)\"]"))
            #expect(DoctorSummary.render(f, CredentialAdvisor.advise(f)).contains("Extended Protection"))
        }
    }

    @Test func negotiateOnlyIsKerberosEvenWithAPasswordConfigured() {
        var f = doctorFindings("http://localhost:8080/")
        f.response = doctorResponse(401, challenges: "Negotiate")
        f.configured = [("corp", "password")]
        let a = CredentialAdvisor.advise(f)
        #expect(active(a).map(\.type) == ["kerberos"])
        #expect(a.suggestions[0].match == ["http://localhost:8080"])
        #expect(field(a.suggestions[0], "keytab")?.value == .string("REPLACE_ME.keytab"))
    }

    /// Only a 401's challenges count: a 200 may carry `WWW-Authenticate: Negotiate <mutual-auth token>`.
    @Test func challengesOfOtherStatusesAreIgnored() {
        var f = doctorFindings("http://localhost:8080/")
        f.response = doctorResponse(200, challenges: "Negotiate oYGzMIGwoAMKAQChCwYJ")
        #expect(CredentialAdvisor.advise(f).suggestions.isEmpty)
    }

    @Test func unknownSchemesAreNoted() {
        var f = doctorFindings("https://h/api")
        f.response = doctorResponse(401, challenges: #"HOBA realm="api", challenge="x""#)
        let a = CredentialAdvisor.advise(f)
        #expect(a.suggestions.isEmpty)
        #expect(a.notes == ["authproxy has no credential for the scheme(s) HOBA"])
    }

    private func tls(
        systemOK: Bool, configured: DoctorFindings.ConfiguredTrust? = nil,
        clientCertificate: DoctorFindings.ClientCertificateRequest? = nil
    ) -> DoctorFindings.TLS {
        DoctorFindings.TLS(
            version: "TLSv1.3", subject: "CN=h", issuer: "CN=Corp CA", notAfter: nil,
            publicKeyPin: "sha256//AAAA",
            systemTrust: systemOK ? .verified : .init(ok: false, reason: "self-signed certificate"),
            configuredTrust: configured, clientCertificate: clientCertificate)
    }

    @Test func unverifiedCertificateGetsServerTrustForTheOrigin() {
        var f = doctorFindings("https://h:8443/arcgis/rest/services")
        f.tls = tls(systemOK: false)
        f.response = doctorResponse(200, body: "{}")
        let s = CredentialAdvisor.advise(f).suggestions
        #expect(s.map(\.type) == ["server-trust"])
        #expect(s[0].match == ["https://h:8443"])
        #expect(field(s[0], "ca_file")?.value == .string("REPLACE_ME.pem"))
        #expect(
            field(s[0], "pinned_public_key")
                == .init(
                    "pinned_public_key", .string("sha256//AAAA"),
                    comment: "or: pin this key (host name still checked)", commentedOut: true))
        #expect(s[0].reasons[0].contains("self-signed certificate"))
    }

    @Test func configuredTrustDecides() {
        var f = doctorFindings("https://h/")
        f.response = doctorResponse(200)
        f.tls = tls(
            systemOK: false, configured: .init(credential: "corp", setting: "ca_file x", verification: .verified))
        #expect(CredentialAdvisor.advise(f).suggestions.isEmpty)
        f.tls = tls(
            systemOK: true,
            configured: .init(
                credential: "pin", setting: "pinned_public_key",
                verification: .init(ok: false, reason: "not the pinned key")))
        let s = CredentialAdvisor.advise(f).suggestions
        #expect(s.map(\.type) == ["server-trust"])
        #expect(s[0].reasons.contains { $0.contains("server-trust 'pin'") })
    }

    @Test func clientCertificateRequested() {
        var f = doctorFindings("https://pki.corp:9443/x/y")
        f.tls = tls(
            systemOK: true,
            clientCertificate: .init(
                acceptedIssuers: ["CN=Client CA"], duringHandshake: true,
                refusal: "tlsv13 alert certificate required"))
        f.requestFailure = "refused"
        var a = CredentialAdvisor.advise(f)
        #expect(a.suggestions.map(\.type) == ["certificate"])
        #expect(a.suggestions[0].match == ["https://pki.corp:9443"])
        #expect(a.suggestions[0].environmentVariables == ["AUTHPROXY_PKI_CORP_9443_P12_PASSWORD"])
        #expect(a.suggestions[0].reasons.joined().contains("CN=Client CA"))
        f.configured = [("mine", "certificate")]
        a = CredentialAdvisor.advise(f)
        #expect(a.suggestions.isEmpty)
        #expect(a.notes.count == 1)
    }

    @Test func everythingAtOnce() {
        var f = doctorFindings("https://gis.corp/arcgis/rest/services/S/FeatureServer/0")
        f.tls = tls(
            systemOK: false, clientCertificate: .init(acceptedIssuers: [], duringHandshake: false, refusal: nil))
        f.restInfo = doctorInfo(
            "https://gis.corp/arcgis/rest/info",
            RestInfo(isTokenBasedSecurity: true, tokenServicesURL: "https://gis.corp/arcgis/tokens/generateToken"))
        f.response = doctorResponse(401, challenges: "Negotiate, NTLM, Basic realm=\"corp\"")
        let a = CredentialAdvisor.advise(f)
        #expect(active(a).map(\.type) == ["server-trust", "certificate", "password", "arcgis-token"])
        #expect(field(active(a)[2], "schemes")?.value == .strings(["basic", "ntlm"]))
    }

    @Test func configuredTokenCredentialIsNotProposedAgain() {
        var f = doctorFindings("https://gis.example.com/arcgis/rest/services/S/FeatureServer")
        f.restInfo = doctorInfo("https://gis.example.com/arcgis/rest/info", RestInfo(isTokenBasedSecurity: true))
        f.response = doctorResponse(200, body: tokenRequiredBody)
        f.configured = [("app", "oauth-app")]
        let a = CredentialAdvisor.advise(f)
        #expect(a.suggestions.isEmpty)
        #expect(a.notes == ["the service uses ArcGIS tokens; the configured oauth-app credential 'app' applies"])
    }

    @Test(arguments: [
        ("gis.example.com", "arcgis-token", "gis-example-com-arcgis-token"),
        ("127.0.0.1", "password", "127-0-0-1-password"),
        ("::1", "server-trust", "1-server-trust"),
        ("..", "kerberos", "service-kerberos"),
    ])
    func names(_ host: String, _ type: String, _ expected: String) {
        #expect(CredentialSuggestion.name(host: host, type: type) == expected)
    }

    @Test func secretReferencesAreShellVariableNames() {
        #expect(
            CredentialSuggestion.secretReference(host: "127.0.0.1", "password") == "${AUTHPROXY_127_0_0_1_PASSWORD}")
        #expect(
            CredentialSuggestion.secretReference(host: "gis-1.example.com", "p12_password")
                == "${AUTHPROXY_GIS_1_EXAMPLE_COM_P12_PASSWORD}")
    }
}

/// `oauth2` proposals: a Bearer challenge, a redirect to an identity provider.
@Suite struct DoctorOAuth2AdviceTests {
    @Test func bearerChallengeProposesOAuth2() {
        var f = doctorFindings("https://ogc.example.com/ogc/collections/x/items")
        f.response = doctorResponse(
            401,
            challenges:
                #"Bearer realm="ogc", authorization_uri="https://login.microsoftonline.com/t1/oauth2/authorize""#)
        let a = CredentialAdvisor.advise(f)
        #expect(a.suggestions.map(\.type) == ["oauth2"])
        let s = a.suggestions[0]
        #expect(s.fields.first { $0.key == "issuer" }?.value == .string("https://login.microsoftonline.com/t1/v2.0"))
        #expect(s.environmentVariables == ["AUTHPROXY_OGC_EXAMPLE_COM_OGC_CLIENT_SECRET"])
        #expect(!a.notes.contains { $0.contains("no credential for the scheme") })
        f.configured = [("kc", "oauth2")]
        #expect(CredentialAdvisor.advise(f).suggestions.isEmpty)
    }

    @Test func redirectToAnIdentityProviderProposesOAuth2WithRedirectRejection() {
        var f = doctorFindings("https://gis.example.com/arcgis/rest/services")
        var r = doctorResponse(302)
        r.location = "https://kc.example.com/realms/corp/protocol/openid-connect/auth"
        f.response = r
        let s = CredentialAdvisor.advise(f).suggestions.filter { $0.type == "oauth2" }
        #expect(s.count == 1)
        #expect(s.first?.fields.first { $0.key == "issuer" }?.value == .string("https://kc.example.com/realms/corp"))
        #expect(
            s.first?.fields.first { $0.key == "rejection" }?.value == .strings(["invalid_token", "redirect_to_issuer"]))
        // A redirect on the same host (a login page of the service itself) is no identity provider.
        r.location = "https://gis.example.com/arcgis/login/authorize"
        f.response = r
        #expect(!CredentialAdvisor.advise(f).suggestions.contains { $0.type == "oauth2" })
    }

    @Test(
        arguments: [
            (
                "https://kc.example.com/realms/gis/protocol/openid-connect/auth?client_id=x",
                "https://kc.example.com/realms/gis"
            ),
            ("https://login.microsoftonline.com/t1/oauth2/v2.0/authorize", "https://login.microsoftonline.com/t1/v2.0"),
            ("https://idp.example.com:8443/oauth2/authorize", "https://idp.example.com:8443"),
            ("https://auth.example.com/application/o/authorize", "https://auth.example.com/application/o"),
            ("https://example.com/login", nil),
        ] as [(String, String?)])
    func issuerGuesses(_ url: String, _ issuer: String?) {
        #expect(CredentialAdvisor.issuerGuess(authorizationURL: url) == issuer)
    }
}
