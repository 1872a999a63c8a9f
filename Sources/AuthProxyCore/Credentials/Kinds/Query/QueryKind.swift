/// `type = "query"`: static query parameters on every matched request (`params = { authkey = "${GEOSERVER_AUTHKEY}" }`
/// for GeoServer's authkey module, `key` for a tile or geocoding vendor), and their values masked in every response
/// the client gets, bodies included: GeoServer writes the authkey into every backlink of a capabilities document
/// and vendors echo keys in tile JSON and error pages.
///
/// The parameters go into the query of every request (GET, HEAD, POST forms, WebSocket handshakes); a client's
/// parameter of the same name is removed, from the query and from a form body the proxy holds. There is no
/// `override_client_token` choice: the proxy's value always wins, so a client cannot pick another identity.
public struct QueryKind: CredentialKind, Equatable {
    public static let typeName = "query"

    let parameters: QueryParameters

    public static func parse(_ entry: inout TableReader, name: String) throws(ConfigError) -> QueryKind {
        guard var table = try entry.table("params") else {
            throw entry.missing(
                "params", "a query credential needs params = { name = \"value\" } (the query parameters it adds)")
        }
        var parameters: [QueryParameters.Parameter] = []
        for (key, node) in table.table.entries {
            guard QueryParameters.isValidName(key) else {
                throw ConfigError(
                    key: table.key(key), line: node.line,
                    "is not a query parameter name (printable ASCII without spaces, &, =, #, ?, % or +)")
            }
            guard let value = try table.string(key) else { continue }
            guard !value.isEmpty else {
                throw ConfigError(key: table.key(key), line: node.line, "is empty: a query parameter needs a value")
            }
            guard QueryParameters.isSendable(value) else {
                throw ConfigError(
                    key: table.key(key), line: node.line,
                    "holds a control byte (a line break?) that a request cannot carry; the value is not shown")
            }
            if parameters.contains(where: { $0.name.lowercased() == key.lowercased() }) {
                throw ConfigError(
                    key: table.key(key), line: node.line,
                    "names the same parameter as another key (names are compared ignoring case)")
            }
            parameters.append(.init(name: key, value: value))
        }
        guard !parameters.isEmpty else {
            throw ConfigError(
                key: entry.key("params"), line: entry.line(of: "params"),
                "is empty: name at least one parameter, e.g. params = { authkey = \"${GEOSERVER_AUTHKEY}\" }")
        }
        return QueryKind(parameters: QueryParameters(parameters))
    }

    public var role: CredentialRole { .token }

    public var identityMaterial: String {
        "query|"
            + parameters.parameters.map { "\($0.name.utf8.count):\($0.name)=\($0.value.utf8.count):\($0.value)" }
            .joined(separator: "|")
    }

    /// The largest urlencoded form held whole to take the client's copy of a parameter out of it (as a token's form).
    static let maxHeldFormBytes = 1024 * 1024

    /// A form whose fields may repeat a parameter is held whole, to take the client's copy out of it; a larger or
    /// chunked one streams (the proxy's value is in the query, which servers read first).
    public func prepare(_ request: RequestView) -> Preparation {
        guard request.isForm, request.method != "GET", request.method != "HEAD", let n = request.bodyLength, n >= 0,
            n <= Int64(Self.maxHeldFormBytes)
        else { return Preparation() }
        return Preparation(holdsBodyUpTo: Self.maxHeldFormBytes)
    }

    public func apply(_ token: IssuedToken?, to request: inout OutgoingRequest) -> ApplyFailure? {
        request.target.pathAndQuery = parameters.applied(to: request.target.pathAndQuery)
        if request.isForm, let body = request.body, let kept = parameters.removing(fromForm: body) {
            request.body = kept
            request.bodyLength = Int64(kept.count)
        }
        return nil
    }

    public func secrets(token: IssuedToken?) -> [String] { parameters.parameters.map(\.value) }

    /// The values travel in URLs, and servers echo URLs.
    public var scrubsResponseBodiesByDefault: Bool { true }

    public var statusDetails: [(String, String)] {
        [("params", parameters.parameters.map(\.name).joined(separator: ", "))]
    }
}

extension CredentialKind where Self == QueryKind {
    static func query(_ parameters: [(String, String)]) -> QueryKind {
        QueryKind(parameters: QueryParameters(parameters.map { .init(name: $0.0, value: $0.1) }))
    }
}
