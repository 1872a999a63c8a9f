/// `type = "query"`: static query parameters on every matched request (`params = { authkey = "${GEOSERVER_AUTHKEY}" }`
/// for GeoServer's authkey module, `key` for a tile or geocoding vendor), and their values masked in every response
/// the client gets, bodies included: GeoServer writes the authkey into every backlink of a capabilities document
/// and vendors echo keys in tile JSON and error pages.
///
/// The parameters go into the query of every request (GET, HEAD, POST forms, WebSocket handshakes); a client's
/// parameter of the same name is removed, from the query and from a form body the proxy holds. There is no
/// `override_client_token` choice: the proxy's value always wins, so a client cannot pick another identity.
struct QueryKind: CredentialKind {
    static let typeName = "query"

    let parameters: QueryParameters

    static func parse(_ entry: inout TableReader, name: String) throws(ConfigError) -> QueryKind {
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

    var role: CredentialRole { .token }

    var identityMaterial: String {
        "query|"
            + parameters.parameters.map { "\($0.name.utf8.count):\($0.name)=\($0.value.utf8.count):\($0.value)" }
            .joined(separator: "|")
    }

    /// A form whose fields may repeat a parameter is held whole, to take the client's copy out of it.
    func prepare(_ request: RequestView) -> Preparation {
        guard request.isForm, request.bodyLength != nil, request.method != "GET", request.method != "HEAD" else {
            return Preparation()
        }
        return Preparation(holdsBodyUpTo: Int(RequestPlanner.maxFormBytes))
    }

    func apply(_ token: IssuedToken?, to request: inout OutgoingRequest) -> ApplyFailure? {
        request.target.pathAndQuery = parameters.applied(to: request.target.pathAndQuery)
        if request.isForm, let body = request.body, let kept = parameters.removing(fromForm: body) {
            request.body = kept
            request.bodyLength = Int64(kept.count)
        }
        return nil
    }

    func secrets(token: IssuedToken?) -> [String] { parameters.parameters.map(\.value) }

    /// The values travel in URLs, and servers echo URLs.
    var scrubsResponseBodiesByDefault: Bool { true }

    var statusDetails: [(String, String)] {
        [("params", parameters.parameters.map(\.name).joined(separator: ", "))]
    }
}
