/// Decides which credentials a service needs from what ``DoctorProbe`` found, the way the ArcGIS SDK's
/// challenge handling would meet each challenge:
///
/// - the certificate does not verify (with the `--config` trust, else the system CAs) → `server-trust`;
/// - the TLS server asks for a client certificate → `certificate`;
/// - a 401 offers Basic, Digest or NTLM → `password` with exactly those `schemes`; Negotiate alone →
///   `kerberos`; Negotiate with NTLM (IIS) → `password` for NTLM, `kerberos` as the commented alternative;
/// - NTLM or Negotiate on an https host → a note that interception breaks clients' own Windows logins there
///   (Extended Protection) and that `intercept = false` keeps it a blind tunnel;
/// - token-based security (`rest/info`) or a 498/499 answer → `arcgis-token`: against the server's own token
///   service when it is standalone, against the owning portal when it is federated (with `oauth-app` as the
///   commented alternative), against the portal itself for portal URLs;
/// - a `Bearer` challenge, or a redirect to an identity provider's authorization endpoint → `oauth2`. When the URL answered without a
///   token, the block is proposed commented out: the server uses tokens, this resource does not need one.
///
/// A type the `--config` file already applies to the URL is not proposed again. Web-tier credentials match
/// ``DoctorFindings/authScope`` (the ArcGIS root where there is one); token credentials the server root (and
/// its portal); TLS credentials the origin, since TLS is per host and port.
enum CredentialAdvisor {
    struct Advice: Sendable, Equatable {
        var suggestions: [CredentialSuggestion]
        /// Sentences for the summary: why something was not proposed, or what to watch out for.
        var notes: [String]
    }

    /// A Windows login (NTLM or Negotiate) to an https host that uses Extended Protection (IIS) is bound to the
    /// certificate the client sees: through interception that is the proxy's, and the server refuses the login.
    /// The proxy's own password/Kerberos credentials are not concerned (libcurl sees the server's certificate);
    /// clients that log in themselves are.
    static func extendedProtectionNote(_ f: DoctorFindings) -> String {
        "\(f.originPlace) offers Windows logins (NTLM/Negotiate) over https: servers with Extended Protection (IIS) bind "
            + "them to the server certificate the client sees, so intercepting this host breaks clients that log in "
            + "with their own Windows identity; keep it a blind tunnel with intercept = false on the credential that "
            + "matches it, or [tls] no_intercept = [\"\(f.originPlace)\"]"
    }

    static func advise(_ f: DoctorFindings) -> Advice {
        var out: [CredentialSuggestion] = []
        var notes: [String] = []
        let host = f.scopePlace

        if let tls = f.tls {
            if !tls.verifies {
                out.append(serverTrust(f, tls, host: f.originPlace))
            }
            if let request = tls.clientCertificate {
                if f.isConfigured("certificate") {
                    notes.append(
                        "the server asks for a client certificate; the configured certificate credential answers it")
                } else {
                    out.append(certificate(f, request, host: f.originPlace))
                }
            }
        }

        let offered = f.response.map { r in r.status == 401 ? r.challenges : [] } ?? []
        let has = { (scheme: String) in offered.contains { $0.is(scheme) } }
        var schemes: [String] = []
        for s in ["basic", "digest", "ntlm"] where has(s) { schemes.append(s) }
        if !schemes.isEmpty {
            if f.isConfigured("password") {
                notes.append(
                    "the server asks for \(schemes.joined(separator: "/")); the configured password credential answers it"
                )
            } else {
                out.append(password(f, schemes: schemes, host: host))
            }
        }
        if has("negotiate") {
            if f.isConfigured("kerberos") {
                notes.append("the server offers Negotiate; the configured kerberos credential answers it")
            } else if schemes.contains("ntlm") {
                var k = kerberos(f, host: host)
                k.isAlternative = true
                k.reasons = ["Or, with a Kerberos identity (Negotiate is offered too), instead of NTLM:"]
                out.append(k)
            } else {
                // A password credential cannot help: the proxy offers Negotiate only with a Kerberos identity.
                out.append(kerberos(f, host: host))
            }
        }
        if f.target.scheme == "https", has("ntlm") || has("negotiate") {
            notes.append(extendedProtectionNote(f))
        }
        if let suggestion = oauth2(f, offered: offered, notes: &notes, host: host) { out.append(suggestion) }
        let unknown = offered.filter { c in !["basic", "digest", "ntlm", "negotiate", "bearer"].contains { c.is($0) } }
        if !unknown.isEmpty {
            notes.append(
                "authproxy has no credential for the scheme(s) \(unknown.map(\.scheme).joined(separator: ", "))")
        }

        out += tokenCredentials(f, notes: &notes)
        // Appended to a proxy.conf that may hold blocks proposed for another service already.
        var used = f.takenNames
        for i in out.indices {
            var name = out[i].name
            var n = 2
            while used.contains(name) {
                name = "\(out[i].name)-\(n)"
                n += 1
            }
            used.insert(name)
            out[i].name = name
        }
        return Advice(suggestions: out, notes: notes)
    }

    // MARK: - TLS

    private static func serverTrust(_ f: DoctorFindings, _ tls: DoctorFindings.TLS, host: String)
        -> CredentialSuggestion
    {
        let reason = (tls.configuredTrust?.verification.reason ?? tls.systemTrust.reason).map { " (\($0))" } ?? ""
        var reasons = ["The certificate of \(f.origin) does not verify\(reason)."]
        if let c = tls.configuredTrust {
            reasons.append(
                "It does not verify with the configured server-trust '\(c.credential)' (\(c.setting)) either.")
        }
        reasons.append("Give the CA that issued it, or pin its key (the pin below is this server's current key).")
        return CredentialSuggestion(
            type: "server-trust", name: CredentialSuggestion.name(host: host, type: "server-trust"), match: [f.origin],
            reasons: reasons,
            fields: [
                .init(
                    "ca_file", .string(CredentialSuggestion.placeholder + ".pem"),
                    comment: "PEM file of the CA certificate(s) that issued it, e.g. \(tls.issuer)"),
                .init(
                    "pinned_public_key", .string(tls.publicKeyPin),
                    comment: "or: pin this key (host name still checked)",
                    commentedOut: true),
                .init("insecure", .bool(true), comment: "or: no verification at all", commentedOut: true),
            ])
    }

    private static func certificate(_ f: DoctorFindings, _ r: DoctorFindings.ClientCertificateRequest, host: String)
        -> CredentialSuggestion
    {
        let name = CredentialSuggestion.name(host: host, type: "certificate")
        var reasons = [
            "\(f.origin) asks for a TLS client certificate"
                + (r.refusal.map { " and refuses the connection without one (\($0))." }
                    ?? " (optional: it answers without one).")
        ]
        if !r.acceptedIssuers.isEmpty {
            reasons.append("Accepted issuers: \(r.acceptedIssuers.joined(separator: "; "))")
        }
        return CredentialSuggestion(
            type: "certificate", name: name, match: [f.origin], reasons: reasons,
            fields: [
                .init(
                    "file", .string(CredentialSuggestion.placeholder + ".p12"),
                    comment: "PKCS#12 (.p12/.pfx) with the certificate and key"),
                .init("password", .string(CredentialSuggestion.secretReference(host: host, "p12_password"))),
                .init(
                    "cert", .string(CredentialSuggestion.placeholder + ".pem"),
                    comment: "or PEM: cert + key instead of file + password",
                    commentedOut: true),
                .init("key", .string(CredentialSuggestion.placeholder + ".key"), commentedOut: true),
            ])
    }

    // MARK: - HTTP authentication

    private static func password(_ f: DoctorFindings, schemes: [String], host: String) -> CredentialSuggestion {
        let name = CredentialSuggestion.name(host: host, type: "password")
        let offered = schemes.map { $0 == "ntlm" ? "NTLM" : $0.prefix(1).uppercased() + $0.dropFirst() }
        var fields: [CredentialSuggestion.Field] = [
            .init("username", .string(CredentialSuggestion.placeholder)),
            .init("password", .string(CredentialSuggestion.secretReference(host: host, "password"))),
            .init("schemes", .strings(schemes), comment: "what the server offers"),
        ]
        if schemes.contains("ntlm") {
            fields.append(
                .init(
                    "domain", .string(CredentialSuggestion.placeholder),
                    comment: "NTLM domain if the user needs one (sent as DOMAIN\\user)", commentedOut: true))
        }
        if schemes == ["basic"], f.target.scheme == "http" {
            fields.append(
                .init(
                    "allow_basic_over_http", .bool(true),
                    comment: "the server is plain http: Basic sends this password in clear on every request"))
        }
        return CredentialSuggestion(
            type: "password", name: name, match: [f.authScope],
            reasons: ["\(f.authScope) answers 401 and offers \(offered.joined(separator: ", "))."], fields: fields)
    }

    private static func kerberos(_ f: DoctorFindings, host: String) -> CredentialSuggestion {
        let name = CredentialSuggestion.name(host: host, type: "kerberos")
        return CredentialSuggestion(
            type: "kerberos", name: name, match: [f.authScope],
            reasons: ["\(f.authScope) answers 401 and offers Negotiate (Kerberos/SPNEGO) only."],
            fields: [
                .init("principal", .string(CredentialSuggestion.placeholder), comment: "e.g. svc-gis@CORP.EXAMPLE"),
                .init("keytab", .string(CredentialSuggestion.placeholder + ".keytab")),
                .init(
                    "password", .string(CredentialSuggestion.secretReference(host: host, "kerberos_password")),
                    comment: "or: the principal's password instead of keytab", commentedOut: true),
            ])
    }

    // MARK: - OAuth2 bearer tokens

    /// A `Bearer` challenge (RFC 6750), or a redirect to an identity provider's authorization endpoint: the service
    /// wants an OAuth2 access token, which an `oauth2` credential obtains (client credentials by default). The issuer
    /// is filled in when the challenge's `authorization_uri` (Entra ID) or the redirect names one.
    private static func oauth2(_ f: DoctorFindings, offered: [AuthChallenge], notes: inout [String], host: String)
        -> CredentialSuggestion?
    {
        let bearer = offered.first { $0.is("bearer") }
        var issuer: String? = nil
        var reasons: [String] = []
        var redirect = false
        if let bearer {
            reasons.append("\(f.authScope) answers 401 with a Bearer challenge: it wants an OAuth2 access token.")
            if let uri = bearer.parameter("authorization_uri") { issuer = issuerGuess(authorizationURL: uri) }
            if let metadata = bearer.parameter("resource_metadata") {
                reasons.append(
                    "Its protected-resource metadata (RFC 9728), which names the authorization servers: \(metadata)")
            }
        } else if let r = f.response, (300..<400).contains(r.status), let location = r.location,
            let u = HTTPURL.parse(location)?.target, u.host.lowercased() != f.target.host.lowercased(),
            let guess = issuerGuess(authorizationURL: location)
        {
            issuer = guess
            redirect = true
            reasons.append(
                "\(f.authScope) redirects to the identity provider \(u.urlHost) to sign in: an identity-aware gateway that accepts an OAuth2 bearer token instead."
            )
        } else {
            return nil
        }
        if f.isConfigured("oauth2") {
            notes.append("the service wants an OAuth2 bearer token; the configured oauth2 credential provides it")
            return nil
        }
        var fields: [CredentialSuggestion.Field] = [
            .init(
                "issuer", .string(issuer ?? CredentialSuggestion.placeholder),
                comment: issuer == nil
                    ? "the OIDC issuer, e.g. https://keycloak.example.com/realms/<realm> or https://login.microsoftonline.com/<tenant>/v2.0"
                    : "guessed from the authorization endpoint: check it"),
            .init("client_id", .string(CredentialSuggestion.placeholder)),
            .init("client_secret", .string(CredentialSuggestion.secretReference(host: host, "client_secret"))),
            .init(
                "scope", .string(CredentialSuggestion.placeholder),
                comment: "e.g. api://<app id>/.default for Entra ID", commentedOut: true),
            .init(
                "private_key", .string(CredentialSuggestion.placeholder + ".key"),
                comment: "or a certificate credential (private_key_jwt) instead of client_secret", commentedOut: true),
        ]
        if redirect {
            fields.append(
                .init(
                    "rejection", .strings(["invalid_token", "redirect_to_issuer"]),
                    comment: "a redirect to the provider means the token was not accepted"))
        }
        return CredentialSuggestion(
            type: "oauth2", name: CredentialSuggestion.name(host: host, type: "oauth2"), match: [f.authScope],
            reasons: reasons, fields: fields)
    }

    /// The issuer an authorization endpoint belongs to, for the shapes of the common providers: Keycloak
    /// (`…/realms/R/protocol/openid-connect/auth` → `…/realms/R`), Entra ID (`…/<tenant>/oauth2/v2.0/authorize` →
    /// `…/<tenant>/v2.0`; v1 `…/<tenant>/oauth2/authorize` → `https://sts.windows.net/<tenant>/` is not guessed,
    /// the v2.0 issuer is proposed), and generic `…/oauth2/authorize` or `…/authorize`. Nil when the URL has none
    /// of these shapes.
    static func issuerGuess(authorizationURL: String) -> String? {
        guard let u = HTTPURL.parse(authorizationURL)?.target else { return nil }
        let path = u.path
        let base = u.isDefaultPort ? "\(u.scheme)://\(u.urlHost)" : "\(u.scheme)://\(u.urlHost):\(u.port)"
        if let r = path.range(of: "/protocol/openid-connect/") { return base + path[..<r.lowerBound] }
        if let r = path.range(of: "/oauth2/v2.0/authorize") { return base + path[..<r.lowerBound] + "/v2.0" }
        if let r = path.range(of: "/oauth2/authorize") {
            let prefix = String(path[..<r.lowerBound])
            return base + prefix + (u.host.lowercased() == "login.microsoftonline.com" ? "/v2.0" : "")
        }
        if path.hasSuffix("/authorize") { return base + path.dropLast("/authorize".count) }
        return nil
    }

    // MARK: - ArcGIS tokens

    private static func tokenCredentials(_ f: DoctorFindings, notes: inout [String]) -> [CredentialSuggestion] {
        let info = f.restInfo?.info
        let answer = f.response?.arcgisError?.meaning
        let wantsToken = answer == .tokenRequired || answer == .invalidToken
        var infoWantsToken = false
        if case .error(let e)? = f.restInfo?.reading, e.rejectsToken { infoWantsToken = true }
        guard wantsToken || infoWantsToken || info?.usesTokens == true else { return [] }
        if let c = f.configured.first(where: {
            ["api-key", "token", "arcgis-token", "oauth-app", "oauth-user", "oauth2"].contains($0.type)
        }) {
            notes.append("the service uses ArcGIS tokens; the configured \(c.type) credential '\(c.name)' applies")
            return []
        }
        let publicResource =
            !wantsToken && !infoWantsToken && f.response.map { (200..<300).contains($0.status) } == true
        if publicResource {
            notes.append(
                "the server uses ArcGIS tokens, but this URL answered without one (a public resource): "
                    + "the token credential below is commented out; enable it for secured services")
        }
        let host = f.scopePlace
        var blocks: [CredentialSuggestion] = []
        if let owner = info?.owningSystemURL, !f.isPortal, let portal = HTTPURL.parse(owner) {
            // Federated: the portal issues the tokens; the proxy exchanges them for server tokens.
            let portalRoot = portal.withoutTrailingSlash
            let tokenURL = f.portalInfo?.info?.tokenServicesURL ?? ServerRoot.sharingRest(portalRoot) + "/generateToken"
            let name = CredentialSuggestion.name(host: host, type: "arcgis-token")
            blocks.append(
                CredentialSuggestion(
                    type: "arcgis-token", name: name, match: unique([f.root, portalRoot]),
                    reasons: [
                        "\(f.root) is federated with the portal \(portalRoot): portal tokens (exchanged for server tokens) are the way in."
                    ],
                    fields: [
                        .init("username", .string(CredentialSuggestion.placeholder), comment: "a portal user"),
                        .init("password", .string(CredentialSuggestion.secretReference(host: host, "arcgis_password"))),
                        .init("token_url", .string(tokenURL), comment: "the portal's token service"),
                    ]))
            blocks.append(oauthApp(portal: portalRoot, match: unique([f.root, portalRoot]), host: host))
        } else if f.isPortal {
            let tokenURL = info?.tokenServicesURL ?? ServerRoot.sharingRest(f.root) + "/generateToken"
            let name = CredentialSuggestion.name(host: host, type: "arcgis-token")
            blocks.append(
                CredentialSuggestion(
                    type: "arcgis-token", name: name, match: [f.root],
                    reasons: ["\(f.root) is a portal: a named user's token from its generateToken, or OAuth."],
                    fields: [
                        .init("username", .string(CredentialSuggestion.placeholder)),
                        .init("password", .string(CredentialSuggestion.secretReference(host: host, "arcgis_password"))),
                        .init("token_url", .string(tokenURL)),
                    ]))
            blocks.append(oauthApp(portal: f.root, match: [f.root], host: host))
        } else {
            let name = CredentialSuggestion.name(host: host, type: "arcgis-token")
            var fields: [CredentialSuggestion.Field] = [
                .init("username", .string(CredentialSuggestion.placeholder)),
                .init("password", .string(CredentialSuggestion.secretReference(host: host, "arcgis_password"))),
            ]
            var reasons = ["\(f.root) uses token-based security (a standalone server: its own token service)."]
            if let t = info?.tokenServicesURL {
                fields.append(.init("token_url", .string(t), comment: "from rest/info"))
            } else {
                reasons = ["\(f.root) wants an ArcGIS token, but rest/info did not name a token service."]
                fields.append(
                    .init(
                        "token_url", .string(f.root + "/tokens/generateToken"),
                        comment: "a guess: check it, or remove it to discover the service from rest/info",
                        commentedOut: true))
            }
            blocks.append(
                CredentialSuggestion(
                    type: "arcgis-token", name: name, match: [f.root], reasons: reasons, fields: fields))
        }
        if publicResource {
            for i in blocks.indices where !blocks[i].isAlternative {
                blocks[i].isAlternative = true
                blocks[i].reasons.append("This URL answered without a token, so this is commented out.")
            }
        }
        return blocks
    }

    private static func oauthApp(portal: String, match: [String], host: String) -> CredentialSuggestion {
        let name = CredentialSuggestion.name(host: host, type: "oauth-app")
        return CredentialSuggestion(
            type: "oauth-app", name: name, match: match,
            reasons: ["Or, as an application (OAuth client credentials registered in the portal), instead of a user:"],
            fields: [
                .init("client_id", .string(CredentialSuggestion.placeholder)),
                .init("client_secret", .string(CredentialSuggestion.secretReference(host: host, "client_secret"))),
                .init("portal_url", .string(portal)),
            ],
            isAlternative: true)
    }

    private static func unique(_ a: [String]) -> [String] {
        var seen = Set<String>()
        return a.filter { seen.insert(ServerRoot.normalized($0)).inserted }
    }
}
