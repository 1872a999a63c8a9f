/// `arcgis-token`: tokens from `generateToken` with a username and password, per confirmed server or portal root,
/// injected as ArcGIS tokens (``ArcGISTokenRequests``) on the ArcGIS APIs.
extension ArcGISTokenSettings: ArcGISTokenKind, FetchedTokenKind {
    public var apiOnly: Bool { true }
    public var signInPages: [String]? { signInURLs }
    public static let typeName = "arcgis-token"
    public var tokenSource: TokenSource { .fetched }
    public static var fetchesTokens: Bool { true }

    public var identityMaterial: String {
        "\(username)\u{0}\(password)\u{0}\(tokenURL ?? "")\u{0}\(referer ?? "")\u{0}\(expirationMinutes ?? 0)\u{0}\(client)"
    }

    public static func parse(_ entry: inout TableReader, name: String) throws(ConfigError) -> ArcGISTokenSettings {
        let configured = try entry.checkedReferer(entry.string("referer"))
        // Bound to a referer unless `requestip` is asked for: a token bound to one egress address breaks in a
        // fleet and on a parent failover (``TokenBinding``).
        let client = try entry.string("client") ?? "referer"
        guard ["referer", "requestip", "ip"].contains(client) else {
            throw ConfigError(
                key: entry.path + ".client", line: entry.line(of: "client"),
                "\(entry.shown("client", client)) is not one of \"referer\", \"requestip\", \"ip\"")
        }
        let synthetic = client == "referer" && configured == nil
        var s = ArcGISTokenSettings(
            username: try entry.required("username", credential: name, type: typeName),
            password: try entry.required("password", credential: name, type: typeName),
            tokenURL: try entry.url("token_url", credential: name, type: typeName, required: false),
            referer: synthetic ? TokenBinding.syntheticReferer(credential: name) : configured,
            expirationMinutes: try entry.int("expiration_minutes", range: 1...525_600), client: client,
            syntheticReferer: synthetic)
        s.signInURLs = try entry.urlList("sign_in_urls")
        return s
    }

    func tokenScope(for target: URLTarget) -> TokenScope { .arcgisRoot }

    func fetchToken(
        _ c: Credential, root: String, isPortal: Bool, fetcher: TokenFetcher,
        done: @escaping (Result<IssuedToken, TokenError>) -> Void
    ) {
        fetcher.generateWithPassword(c, self, root: root, isPortal: isPortal, done: done)
    }

    var configuredRoots: [(url: String, both: Bool)] { tokenURL.map { [($0, false)] } ?? [] }

    /// The portal of a `token_url` under `/sharing/`.
    var portalRoot: String? {
        guard let t = tokenURL, let r = t.range(of: "/sharing/", options: .caseInsensitive) else { return nil }
        return String(t[..<r.lowerBound])
    }

    func binding(credential name: String) -> TokenBinding? {
        if client == "referer", let r = referer { return .referer(r) }
        return .address(client: client)
    }

    public var checkAttributes: String {
        ", client=\(client)"
            + (client == "referer" ? " (referer \(referer ?? "")\(syntheticReferer ? ", synthetic" : ""))" : "")
    }
}

extension CredentialKind where Self == ArcGISTokenSettings {
    static func arcgisToken(_ s: ArcGISTokenSettings) -> ArcGISTokenSettings { s }
}
