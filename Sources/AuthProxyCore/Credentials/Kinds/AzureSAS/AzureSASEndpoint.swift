/// Where the SAS for a request comes from: the token endpoint URL pattern (`token_url`) with its placeholders filled
/// from the request's container. Planetary Computer offers two shapes, and either works:
///
/// - `…/api/sas/v1/token/{account}/{container}`: the storage account and container, straight from the blob URL (what
///   the `planetary-computer` Python package asks for); nothing to map.
/// - `…/api/sas/v1/token/{collection}`: a STAC collection id. A blob URL does not name its collection, so the
///   configuration maps containers to collections (`collections`, keyed `"account/container"` or `"container"`), with
///   `collection` for every container the map does not name.
///
/// The filled-in URL is the token's scope: one token per container (or collection), shared by every request for it.
/// Pure.
struct AzureSASEndpoint: Equatable, Sendable {
    /// What a pattern may hold in braces.
    enum Placeholder: String, CaseIterable, Sendable {
        case account, container, collection
    }

    /// `token_url` as configured.
    var pattern: String
    /// The placeholders `pattern` uses.
    var placeholders: Set<Placeholder>
    /// The storage account for hosts that do not name it (`account`).
    var account: String?
    /// The collection of every container `collections` does not name (`collection`).
    var collection: String?
    /// Container to collection: `"account/container"` or `"container"` keys (`collections`).
    var collections: [String: String]

    /// Why a configuration cannot work.
    struct Problem: Error, Equatable, Sendable {
        var message: String
    }

    /// The placeholders of a `token_url`, or why it cannot be one: an http(s) URL once they are filled, whose braces
    /// hold only `{account}`, `{container}` and `{collection}`, without a subscription key in its query.
    static func placeholders(of pattern: String) -> Result<Set<Placeholder>, Problem> {
        var found = Set<Placeholder>()
        var sample = ""
        var rest = Substring(pattern)
        while let open = rest.firstIndex(of: "{") {
            sample += rest[..<open]
            guard let close = rest[open...].firstIndex(of: "}") else {
                return .failure(Problem(message: "has a '{' without its '}'"))
            }
            let name = rest[rest.index(after: open)..<close]
            guard let p = Placeholder(rawValue: String(name)) else {
                return .failure(
                    Problem(
                        message:
                            "has the placeholder {\(name)}; only {account}, {container} and {collection} are filled in")
                )
            }
            found.insert(p)
            sample += "x"
            rest = rest[rest.index(after: close)...]
        }
        sample += rest
        guard !sample.contains("}") else { return .failure(Problem(message: "has a '}' without its '{'")) }
        guard let u = HTTPURL.parse(sample), u.target.scheme == "http" || u.target.scheme == "https" else {
            return .failure(Problem(message: "is not an http(s) URL"))
        }
        // The filled-in URL names the token's scope on the status page, in metrics and in logs.
        if TokenInjection.queryHasField(u.target.pathAndQuery, "subscription-key") {
            return .failure(
                Problem(
                    message:
                        "carries subscription-key in its query, where logs and the status page would show it: set subscription_key instead"
                ))
        }
        if found.contains(.collection), found.contains(.account) || found.contains(.container) {
            return .failure(
                Problem(
                    message:
                        "mixes {collection} with {account}/{container}: Planetary Computer's endpoints take one or the other"
                ))
        }
        return .success(found)
    }

    /// Checks the settings together: `{collection}` needs `collection` or `collections`, and those need it.
    func validated() -> Problem? {
        let mapped = collection != nil || !collections.isEmpty
        if placeholders.contains(.collection), !mapped {
            return Problem(
                message:
                    "token_url has {collection}: set collection (one collection for every container) or collections (container → collection)"
            )
        }
        if !placeholders.contains(.collection), mapped {
            return Problem(message: "collection and collections are used only by a token_url with {collection}")
        }
        return nil
    }

    /// The token endpoint URL for a request to `target`, or why none serves it.
    func tokenURL(for target: URLTarget) -> Result<String, AzureBlobContainer.Refusal> {
        if placeholders.isEmpty { return .success(pattern) }
        let c: AzureBlobContainer
        switch AzureBlobContainer.of(target, configuredAccount: account) {
        case .failure(let why): return .failure(why)
        case .success(let found): c = found
        }
        var values: [Placeholder: String] = [.container: c.container]
        if placeholders.contains(.account) {
            guard let a = c.account else {
                return .failure(
                    .init(
                        message:
                            "the host \(target.host) does not name a storage account (<account>.blob.core.windows.net): set account"
                    ))
            }
            values[.account] = a
        }
        if placeholders.contains(.collection) {
            guard let name = collection(for: c) else {
                return .failure(
                    .init(
                        message:
                            "no collection is configured for container '\(c.container)'\(c.account.map { " of account '\($0)'" } ?? ""): add it to collections"
                    ))
            }
            values[.collection] = name
        }
        return .success(filled(values))
    }

    /// The collection of container `c`: `collections["account/container"]`, then `collections["container"]`, then
    /// `collection`.
    func collection(for c: AzureBlobContainer) -> String? {
        if let a = c.account, let name = collections["\(a)/\(c.container)"] { return name }
        return collections[c.container] ?? collection
    }

    /// `pattern` with each placeholder replaced by its value, percent-encoded (a value is one path segment).
    private func filled(_ values: [Placeholder: String]) -> String {
        var out = pattern
        for (p, v) in values { out = out.replacing("{\(p.rawValue)}", with: TokenInjection.percentEncoded(v)) }
        return out
    }

    /// Whether `key` can be a `collections` key: `"container"` or `"account/container"`.
    static func isCollectionsKey(_ key: String) -> Bool {
        let parts = key.split(separator: "/", omittingEmptySubsequences: false)
        switch parts.count {
        case 1: return AzureBlobContainer.isContainerName(key)
        case 2:
            return AzureBlobContainer.isAccountName(String(parts[0]))
                && AzureBlobContainer.isContainerName(String(parts[1]))
        default: return false
        }
    }

    /// Whether `id` can be a STAC collection id in a URL path: letters, digits, `-`, `_`, `.`, not `.` or `..`.
    static func isCollectionID(_ id: String) -> Bool {
        guard !id.isEmpty, id != ".", id != "..", id.utf8.count <= 256 else { return false }
        return id.utf8.allSatisfy { b in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(b) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(b)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b) || b == UInt8(ascii: "-")
                || b == UInt8(ascii: "_") || b == UInt8(ascii: ".")
        }
    }
}
