import Foundation

/// What `<server root>/rest/info?f=json` (ArcGIS Server) or `<portal>/sharing/rest/info?f=json` (Portal,
/// ArcGIS Online) says about how the service is secured: the fields `authproxy doctor` reports and bases its
/// advice on.
///
/// Read leniently like the token services' answers (``ServerInfoResponse``): a member of an unexpected type
/// counts as absent. `currentVersion` is a number on servers (`11.1`) and sometimes a string.
struct RestInfo: Decodable, Sendable, Equatable {
    var currentVersion: String?
    var fullVersion: String?
    /// The portal a server is federated with (or, from a portal's own info, the portal itself).
    var owningSystemURL: String?
    /// nil when `authInfo` does not say.
    var isTokenBasedSecurity: Bool?
    var tokenServicesURL: String?
    /// Minutes.
    var shortLivedTokenValidity: Int?

    private enum Keys: String, CodingKey {
        case currentVersion, fullVersion, authInfo
        case owningSystemURL = "owningSystemUrl"
    }

    private enum AuthInfoKeys: String, CodingKey {
        case isTokenBasedSecurity, shortLivedTokenValidity
        case tokenServicesURL = "tokenServicesUrl"
    }

    init(
        currentVersion: String? = nil, fullVersion: String? = nil, owningSystemURL: String? = nil,
        isTokenBasedSecurity: Bool? = nil, tokenServicesURL: String? = nil, shortLivedTokenValidity: Int? = nil
    ) {
        self.currentVersion = currentVersion
        self.fullVersion = fullVersion
        self.owningSystemURL = owningSystemURL
        self.isTokenBasedSecurity = isTokenBasedSecurity
        self.tokenServicesURL = tokenServicesURL
        self.shortLivedTokenValidity = shortLivedTokenValidity
    }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Keys.self)
        var version = c.lenientString(.currentVersion)
        if version == nil, let d = try? c.decode(Double.self, forKey: .currentVersion) {
            // 11.1 stays "11.1"; 10 reads "10".
            version = d == d.rounded() ? String(Int64(d)) : String(d)
        }
        let auth = try? c.nestedContainer(keyedBy: AuthInfoKeys.self, forKey: .authInfo)
        self.init(
            currentVersion: version, fullVersion: c.lenientString(.fullVersion),
            owningSystemURL: c.lenientString(.owningSystemURL).flatMap { $0.isEmpty ? nil : $0 },
            isTokenBasedSecurity: auth?.lenientBool(.isTokenBasedSecurity),
            tokenServicesURL: auth?.lenientString(.tokenServicesURL).flatMap { $0.isEmpty ? nil : $0 },
            shortLivedTokenValidity: auth?.lenientInt64(.shortLivedTokenValidity).map { Int($0) })
    }

    /// What the body of a `rest/info` request turned out to be.
    enum Reading: Sendable, Equatable {
        /// Server or portal information.
        case info(RestInfo)
        /// An ArcGIS error object instead (499: even `rest/info` wants a token; 403; …).
        case error(TokenServiceRefusal)
        /// Not JSON, or JSON without any of the members above: not an ArcGIS service (or a login page).
        case notArcGIS
    }

    /// Reads a `rest/info` answer. A JSON object counts as information only if it has `authInfo`,
    /// `currentVersion`, `fullVersion` or `owningSystemUrl`: a front end's own JSON (`{"status":"ok"}`) does not.
    static func read(_ body: [UInt8]) -> Reading {
        let data = Data(body)
        if let e = try? JSONDecoder().decode(TokenServiceReply<NoMembers>.self, from: data), case .refused(let r) = e,
            r.isObject
        {
            return .error(r)
        }
        guard let info = try? JSONDecoder().decode(RestInfo.self, from: data),
            info.isTokenBasedSecurity != nil || info.currentVersion != nil || info.fullVersion != nil
                || info.owningSystemURL != nil || info.tokenServicesURL != nil
        else { return .notArcGIS }
        return .info(info)
    }

    /// The version to show: `fullVersion`, else `currentVersion`.
    var version: String? { fullVersion ?? currentVersion }

    /// Whether tokens are the way in: `isTokenBasedSecurity`, or a token service named without it.
    var usesTokens: Bool { isTokenBasedSecurity ?? (tokenServicesURL != nil) }
}

/// A body read only for its error member.
private struct NoMembers: Decodable {
    init(from decoder: any Decoder) throws {}
}
