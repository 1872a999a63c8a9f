/// `print_services` on a `[[credential]]` (``Credential/printServices``), read by `parseCredential`.
extension ConfigLoader {
    /// The print service prefixes listed (`list`, nil: the key is absent): http(s) URL prefixes (normally ending in `…/GPServer`). Only the
    /// kinds whose tokens are ArcGIS tokens can go into a web map; an empty list is refused (leave the key out).
    func printServices(
        _ list: (values: [String], line: Int)?, entry: TableReader, kind: any CredentialKind, name: String
    ) throws(ConfigError) -> [MatchPrefix] {
        guard let list else { return [] }
        let key = entry.path + ".print_services"
        guard kind is any ArcGISTokenKind else {
            let kinds = CredentialKinds.all.filter { $0 is any ArcGISTokenKind.Type }.map { $0.typeName }
            throw ConfigError(
                key: key, line: list.line,
                "print_services applies to credentials whose tokens are ArcGIS tokens (\(kinds.joined(separator: ", "))), not to \(kind.typeName) ('\(name)')"
            )
        }
        guard !list.values.isEmpty else {
            throw ConfigError(
                key: key, line: list.line,
                "print_services is empty: list the print services that may receive the tokens of '\(name)', or leave the key out"
            )
        }
        return try list.values.map { (s: String) throws(ConfigError) -> MatchPrefix in
            guard let p = MatchPrefix.parse(s), !p.wildcard, !p.path.isEmpty else {
                throw ConfigError(
                    key: key, line: list.line,
                    "\(entry.shown("print_services", s)) is not a print service URL prefix like https://host/arcgis/rest/services/Utilities/PrintingTools/GPServer (http or https, a host without a wildcard, a path)"
                )
            }
            return p
        }
    }
}
