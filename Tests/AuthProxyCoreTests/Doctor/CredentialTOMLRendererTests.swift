import Testing

@testable import AuthProxyCore

#if canImport(Glibc)
    import Glibc
#endif

@Suite struct DoctorTOMLRendererTests {
    @Test(arguments: [
        "plain", "", #"quote " and backslash \ and \n literally"#, "line\nbreak\ttab\r\u{08}\u{0C}",
        "nul\u{0}and\u{1F}and\u{7F}",
        "ünïcødé 🗺", #"C:\Users\gis"#, #"CORP\alice"#,
    ])
    func quotedStringsReadBackUnchanged(_ s: String) throws {
        let doc = try TOMLParser.parse("k = " + CredentialTOMLRenderer.quoted(s) + "\n")
        guard case .string(let v)? = doc["k"]?.value else {
            Issue.record("not a string")
            return
        }
        #expect(v == s)
    }

    /// A comment holding a line break would end early and turn the rest into (broken) TOML.
    @Test func commentsStayOnTheirLine() throws {
        let s = CredentialSuggestion(
            type: "api-key", name: "n", match: ["https://h"], reasons: ["evil\n[[credential]]\nname = 1"],
            fields: [.init("key", .string("k"), comment: "also\nevil = true")])
        let text = CredentialTOMLRenderer.render([s], header: ["a\nb = 2"])
        let doc = try TOMLParser.parse(text)
        #expect(doc.entries.map(\.key) == ["credential"])
        guard case .array(let items)? = doc["credential"]?.value, items.count == 1, case .table(let t) = items[0].value
        else {
            Issue.record("expected one credential")
            return
        }
        #expect(t.entries.map(\.key) == ["name", "type", "match", "key"])
    }

    @Test func alternativesAndCommentedFieldsAreComments() throws {
        var alt = CredentialSuggestion(
            type: "oauth-app", name: "b", match: ["https://h/portal", "https://h/server"], reasons: ["Or:"],
            fields: [.init("client_id", .string("REPLACE_ME"))])
        alt.isAlternative = true
        let main = CredentialSuggestion(
            type: "arcgis-token", name: "a", match: ["https://h/server"], reasons: [],
            fields: [.init("username", .string("u")), .init("token_url", .string("https://h/t"), commentedOut: true)])
        let text = CredentialTOMLRenderer.render([main, alt], header: ["header"])
        #expect(
            text == """
                # header

                [[credential]]
                name        = "a"
                type        = "arcgis-token"
                match       = "https://h/server"
                username    = "u"
                # token_url = "https://h/t"

                # Or:
                # [[credential]]
                # name      = "b"
                # type      = "oauth-app"
                # match     = ["https://h/portal", "https://h/server"]
                # client_id = "REPLACE_ME"

                """)
    }

    /// What the advisor proposes is what `authproxy check` reads: refused while placeholders are open, accepted
    /// (with the right types and matches) once the files exist and the environment has the secrets.
    @Test func advisedBlocksLoadOnceFilledIn() throws {
        var f = doctorFindings("https://gis.corp/arcgis/rest/services/S/FeatureServer/0")
        f.tls = DoctorFindings.TLS(
            version: "TLSv1.3", subject: "CN=gis.corp", issuer: "CN=Corp \"Root\" CA", notAfter: nil,
            publicKeyPin: "sha256//AAAA",
            systemTrust: .init(ok: false, reason: "unable to get local issuer certificate"))
        f.restInfo = doctorInfo(
            "https://gis.corp/arcgis/rest/info",
            RestInfo(owningSystemURL: "https://gis.corp/portal", isTokenBasedSecurity: true))
        f.response = doctorResponse(401, challenges: "Negotiate, NTLM")
        let advice = CredentialAdvisor.advise(f)
        let text = CredentialTOMLRenderer.render(advice.suggestions, header: ["doctor"])

        #expect(throws: ConfigError.self) { try ConfigLoader(environment: [:]).parse(text) }

        var template = Array("/tmp/authproxy-doctor-XXXXXX".utf8CString)
        let dir = template.withUnsafeMutableBufferPointer {
            String(
                decoding: UnsafeRawBufferPointer(start: mkdtemp($0.baseAddress!), count: strlen($0.baseAddress!)),
                as: UTF8.self)
        }
        defer { _ = rmdir(dir) }
        let ca = dir + "/ca.pem"
        let fd = open(ca, O_CREAT | O_WRONLY, 0o600)
        close(fd)
        defer { unlink(ca) }
        let filled = text.replacingPlaceholder(key: "ca_file", with: ca).replacing("\"REPLACE_ME\"", with: "\"alice\"")
        var env: [String: String] = [:]
        for s in advice.suggestions where !s.isAlternative { for v in s.environmentVariables { env[v] = "secret" } }
        let config = try ConfigLoader(environment: env).parse(filled)
        #expect(config.credentials.map(\.kind.typeName) == ["server-trust", "password", "arcgis-token"])
        #expect(
            config.credentials.map { $0.match.map(\.description) } == [
                ["https://gis.corp"], ["https://gis.corp/arcgis"],
                ["https://gis.corp/arcgis", "https://gis.corp/portal"],
            ])
        if let a = config.credentials[2].kind as? ArcGISTokenSettings {
            #expect(a.tokenURL == "https://gis.corp/portal/sharing/rest/generateToken")
            #expect(a.password == "secret")
        } else {
            Issue.record("not arcgis-token")
        }
        if let p = config.credentials[1].kind as? PasswordSettings {
            #expect(p.schemes == [.ntlm])
        }
    }
}

extension String {
    fileprivate func replacingPlaceholder(key: String, with path: String) -> String {
        split(separator: "\n", omittingEmptySubsequences: false).map { line -> String in
            line.hasPrefix(key + " ") && line.contains("\"REPLACE_ME")
                ? key + " = " + CredentialTOMLRenderer.quoted(path) : String(line)
        }.joined(separator: "\n")
    }
}

@Suite struct DoctorSummaryTests {
    @Test func neverShowsQueriesOrHandshakeTokens() {
        var f = doctorFindings("https://h/arcgis/rest/services/S/MapServer?token=SECRET-TOKEN&f=json")
        f.response = doctorResponse(401, challenges: "NTLM TlRMTVNTUAACAAAADAAMADgAAAAFgomi, Basic realm=\"r\"")
        f.response?.location = "https://h/login"
        let text = DoctorSummary.render(f, CredentialAdvisor.advise(f))
        #expect(!text.contains("SECRET"))
        #expect(!text.contains("TlRM"))
        #expect(text.contains("authproxy doctor: https://h/arcgis/rest/services/S/MapServer\n"))
        #expect(text.contains("WWW-Authenticate: NTLM, Basic realm=\"r\""))
        #expect(text.contains("configure: password (h-password)"))
        #expect(text.contains("then set AUTHPROXY_H_PASSWORD in the proxy's environment"))
    }

    @Test func reportsWhatEachProbeSaw() {
        var f = doctorFindings("https://h:8443/arcgis/rest/services")
        f.tls = DoctorFindings.TLS(
            version: "TLSv1.2", subject: "CN=h", issuer: "CN=CA", notAfter: "Jan  1 00:00:00 2030 GMT",
            publicKeyPin: "sha256//AAAA", systemTrust: .init(ok: false, reason: "self-signed certificate"),
            configuredTrust: .init(credential: "corp", setting: "ca_file /ca.pem", verification: .verified),
            clientCertificate: .init(acceptedIssuers: ["CN=Client CA"], duringHandshake: false, refusal: nil))
        f.restInfo = doctorInfo(
            "https://h:8443/arcgis/rest/info",
            RestInfo(
                fullVersion: "11.3.0", owningSystemURL: "https://h/portal",
                isTokenBasedSecurity: true, tokenServicesURL: "https://h/portal/sharing/rest/generateToken",
                shortLivedTokenValidity: 30))
        f.response = doctorResponse(200, body: tokenRequiredBody)
        f.configured = [("corp", "server-trust")]
        let text = DoctorSummary.render(f, CredentialAdvisor.advise(f))
        for expected in [
            "TLS        TLSv1.2", "does NOT verify against the system CAs: self-signed certificate",
            "verifies with server-trust 'corp' (ca_file /ca.pem) from --config",
            "asks for a client certificate after the handshake (post-handshake/renegotiation); accepted issuers: CN=Client CA",
            "without one the server still answers (optional)",
            "ArcGIS Server 11.3.0, token-based security", "short-lived token validity: 30 min",
            "owningSystemUrl: https://h/portal (federated)", "GET → HTTP 200",
            #"ArcGIS error 499 "Token Required" (GWM_0003)"#, "--config   applies: corp (server-trust)",
            "configure: certificate (h-8443-certificate), arcgis-token (h-8443-arcgis-token)",
        ] {
            #expect(text.contains(expected), "\(expected)\n\(text)")
        }
    }

    @Test func nothingNeeded() {
        var f = doctorFindings("http://h/")
        f.response = doctorResponse(200)
        #expect(DoctorSummary.render(f, CredentialAdvisor.advise(f)).contains("no credential needed"))
    }
}
