/// The storage account and container a Blob Storage request names. A blob URL is
/// `https://{account}.blob.core.windows.net/{container}/{blob}`: the account is the host's first label, the container
/// the first path segment. A host that does not say its account (a private endpoint behind another name, a CDN, a
/// test server) takes the `account` the credential configures. Pure.
struct AzureBlobContainer: Equatable, Sendable {
    /// nil when neither the host nor the configuration names it.
    var account: String?
    var container: String

    /// Why a request names no container: the client's answer (a 502 naming the credential) says it.
    struct Refusal: Error, Equatable, Sendable {
        var message: String
    }

    /// The container `target` names; `configuredAccount` wins over the host's.
    static func of(_ target: URLTarget, configuredAccount: String?) -> Result<AzureBlobContainer, Refusal> {
        let path = target.path
        guard path.hasPrefix("/") else {
            return .failure(Refusal(message: "the request path does not start with /<container>/"))
        }
        let segment = path.dropFirst().prefix { $0 != "/" }
        // Container names need no escaping; a client may still have escaped a letter, as Azure would decode it.
        let name = String(decoding: TokenInjection.percentDecoded(segment.utf8), as: UTF8.self)
        guard !name.isEmpty else {
            return .failure(
                Refusal(message: "the URL names no blob container (its path must start with /<container>/)"))
        }
        guard isContainerName(name) else {
            return .failure(
                Refusal(
                    message:
                        "the URL's first path segment is not a blob container name (3-63 lowercase letters, digits and single hyphens)"
                ))
        }
        return .success(AzureBlobContainer(account: configuredAccount ?? account(ofHost: target.host), container: name))
    }

    /// The account of a Blob Storage (or Data Lake) host: `{account}.blob.core.windows.net`, the sovereign clouds'
    /// `{account}.blob.core.chinacloudapi.cn` / `.usgovcloudapi.net`, `{account}.dfs.…`, and the read-access
    /// secondary `{account}-secondary.blob.…` (its SAS is the account's own). nil for any other host.
    static func account(ofHost host: String) -> String? {
        let labels = host.lowercased().split(separator: ".", omittingEmptySubsequences: false)
        guard labels.count >= 4, labels[1] == "blob" || labels[1] == "dfs", labels[2] == "core" else { return nil }
        var first = labels[0]
        if first.hasSuffix("-secondary") { first = first.dropLast("-secondary".count) }
        let name = String(first)
        return isAccountName(name) ? name : nil
    }

    /// A storage account name: 3-24 lowercase letters and digits.
    static func isAccountName(_ s: String) -> Bool {
        (3...24).contains(s.utf8.count) && s.utf8.allSatisfy { isLowerAlnum($0) }
    }

    /// A container name: 3-63 lowercase letters, digits and hyphens, starting and ending with a letter or digit, no
    /// two hyphens in a row; or one of the system containers `$root`, `$web`, `$logs`.
    static func isContainerName(_ s: String) -> Bool {
        if s == "$root" || s == "$web" || s == "$logs" { return true }
        let u = Array(s.utf8)
        guard (3...63).contains(u.count), isLowerAlnum(u[0]), isLowerAlnum(u[u.count - 1]) else { return false }
        for i in u.indices {
            if u[i] == UInt8(ascii: "-") {
                if u[i - 1] == UInt8(ascii: "-") { return false }
            } else if !isLowerAlnum(u[i]) {
                return false
            }
        }
        return true
    }

    private static func isLowerAlnum(_ b: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(b) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b)
    }
}
