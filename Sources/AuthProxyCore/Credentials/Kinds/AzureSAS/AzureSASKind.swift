/// `type = "azure-sas"`: Azure Blob Storage read through a shared access signature that a SAS token endpoint hands
/// out per container — Microsoft Planetary Computer's Data Authentication API (`/api/sas/v1/token/…`) and services
/// of its shape. The SAS is appended to every matched request's query (a client's own SAS fields replaced), one
/// token per container or collection (``AzureSASEndpoint``), fetched by the token service (single flight, cached
/// until `msft:expiry` less the refresh margin, shared with the fleet) and fetched again when the blob store answers
/// 403 `AuthenticationFailed` (an expired, revoked or re-keyed SAS).
///
/// The SAS travels in the URL, so its signature is masked in response heads and, by default, bodies: a blob store
/// or a tile server in front of it may echo the URL it was asked for.
public struct AzureSASKind: CredentialKind, FetchedTokenKind, Equatable {
    public static let typeName = "azure-sas"
    public static var fetchesTokens: Bool { true }
    public static var secretKeys: Set<String> { ["subscription_key"] }

    var endpoint: AzureSASEndpoint
    /// Sent as `Ocp-Apim-Subscription-Key` to the token endpoint (Planetary Computer's API Management).
    var subscriptionKey: String?

    /// The field API Management reads the subscription key from.
    static let subscriptionKeyField = "Ocp-Apim-Subscription-Key"

    public static func parse(_ entry: inout TableReader, name: String) throws(ConfigError) -> AzureSASKind {
        guard let pattern = try entry.string("token_url"), !pattern.isEmpty else {
            throw entry.missing(
                "token_url",
                "credential '\(name)' of type azure-sas needs token_url, e.g. \"https://planetarycomputer.microsoft.com/api/sas/v1/token/{account}/{container}\""
            )
        }
        let placeholders: Set<AzureSASEndpoint.Placeholder>
        switch AzureSASEndpoint.placeholders(of: pattern) {
        case .failure(let why):
            throw ConfigError(
                key: entry.key("token_url"), line: entry.line(of: "token_url"),
                "\(entry.shown("token_url", pattern)) \(why.message)")
        case .success(let p):
            placeholders = p
        }
        let account = try entry.string("account")
        if let account, !AzureBlobContainer.isAccountName(account) {
            throw ConfigError(
                key: entry.key("account"), line: entry.line(of: "account"),
                "\(entry.shown("account", account)) is not a storage account name (3-24 lowercase letters and digits)")
        }
        let collection = try entry.string("collection")
        if let collection, !AzureSASEndpoint.isCollectionID(collection) {
            throw ConfigError(
                key: entry.key("collection"), line: entry.line(of: "collection"),
                "\(entry.shown("collection", collection)) is not a collection id (letters, digits, '-', '_', '.')")
        }
        var collections: [String: String] = [:]
        if var t = try entry.table("collections") {
            for (k, _) in t.table.entries {
                guard AzureSASEndpoint.isCollectionsKey(k) else {
                    throw ConfigError(
                        key: t.key(k), line: t.line(of: k),
                        "'\(k)' is not \"container\" or \"account/container\" (lowercase storage names)")
                }
                guard let v = try t.string(k), AzureSASEndpoint.isCollectionID(v) else {
                    throw ConfigError(
                        key: t.key(k), line: t.line(of: k), "needs a collection id (letters, digits, '-', '_', '.')")
                }
                collections[k] = v
            }
            try t.finish()
        }
        let key = try entry.string("subscription_key")
        if let key {
            if key.isEmpty {
                throw ConfigError(
                    key: entry.key("subscription_key"), line: entry.line(of: "subscription_key"), "is empty")
            }
            if let why = OutboundHead.fieldProblem(name: subscriptionKeyField, value: key) {
                throw ConfigError(
                    key: entry.key("subscription_key"), line: entry.line(of: "subscription_key"),
                    "the value (a secret, not shown) \(why)")
            }
        }
        let endpoint = AzureSASEndpoint(
            pattern: pattern, placeholders: placeholders, account: account, collection: collection,
            collections: collections)
        if let problem = endpoint.validated() {
            let k =
                placeholders.contains(.collection) ? "token_url" : (collection != nil ? "collection" : "collections")
            throw ConfigError(key: entry.key(k), line: entry.line(of: k), problem.message)
        }
        return AzureSASKind(endpoint: endpoint, subscriptionKey: key)
    }

    public var role: CredentialRole { .token }

    public var identityMaterial: String {
        let map = endpoint.collections.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        return [
            endpoint.pattern, endpoint.account ?? "", endpoint.collection ?? "", map.joined(separator: ","),
            subscriptionKey ?? "",
        ].joined(separator: "\u{0}")
    }

    public var tokenSource: TokenSource { .fetched }

    /// The SAS fields it puts in the query: no other credential on the request may set them.
    public var occupies: [String] { Self.occupiedFields }
    private static let occupiedFields = AzureSASQuery.fieldNames.sorted().map { "?" + $0 }

    func tokenScope(for target: URLTarget) -> TokenScope {
        switch endpoint.tokenURL(for: target) {
        case .success(let url): return .named(url)
        case .failure(let why): return .refused(why.message)
        }
    }

    func fetchToken(
        _ c: Credential, root: String, isPortal: Bool, fetcher: TokenFetcher,
        done: @escaping (Result<IssuedToken, TokenError>) -> Void
    ) {
        fetcher.azureSASToken(c, self, tokenURL: root, done: done)
    }

    public func apply(_ token: IssuedToken?, to request: inout OutgoingRequest) -> ApplyFailure? {
        guard let token else {
            return ApplyFailure(message: "Credential '\(request.credential)': no SAS token to apply")
        }
        request.target.pathAndQuery = AzureSASQuery.merged(pathAndQuery: request.target.pathAndQuery, sas: token.value)
        return nil
    }

    /// Azure Storage names every authentication failure in `x-ms-error-code`, HEAD answers included (they have no
    /// body): `AuthenticationFailed` is a SAS that is expired, malformed or signed with a key the account no longer
    /// has, which a new SAS cures. Other 403 codes (`AuthorizationPermissionMismatch`, `AuthorizationFailure`: the
    /// SAS lacks a permission, a firewall rule) would refuse a new one just the same.
    public func rejection(of head: ResponseView) -> Rejection {
        guard head.status == 403, let code = head.first("x-ms-error-code"), code == "AuthenticationFailed" else {
            return .none
        }
        return .rejected
    }

    public func secrets(token: IssuedToken?) -> [String] {
        token.map { AzureSASQuery.secrets(of: $0.value) } ?? []
    }

    public var scrubsResponseBodiesByDefault: Bool { true }

    public var statusDetails: [(String, String)] {
        var rows = [("token_url", TokenFetcher.redacted(endpoint.pattern))]
        if let a = endpoint.account { rows.append(("account", a)) }
        if let c = endpoint.collection { rows.append(("collection", c)) }
        if !endpoint.collections.isEmpty { rows.append(("collections", "\(endpoint.collections.count)")) }
        rows.append(("subscription_key", subscriptionKey == nil ? "none" : "set"))
        return rows
    }
}

extension CredentialKind where Self == AzureSASKind {
    static func azureSAS(_ k: AzureSASKind) -> AzureSASKind { k }
}
