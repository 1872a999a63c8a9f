#if canImport(Glibc)
    import Glibc
#endif

/// Readers the credential kinds share for their keys, with the errors `authproxy check` gives (key and line, never a
/// secret's value).
extension TableReader {
    /// A non-empty string `key` of credential `name`, of type `type`.
    mutating func required(_ key: String, credential name: String, type: String) throws(ConfigError) -> String {
        guard let v = try string(key), !v.isEmpty else {
            throw missing(key, "credential '\(name)' of type \(type) needs \(key)")
        }
        return v
    }

    /// An http(s) URL (without its trailing slash).
    mutating func url(_ key: String, credential name: String, type: String, required isRequired: Bool)
        throws(ConfigError) -> String?
    {
        guard let v = isRequired ? try required(key, credential: name, type: type) : try string(key) else { return nil }
        guard let u = HTTPURL.parse(v) else {
            throw ConfigError(key: path + "." + key, line: line(of: key), "\(shown(key, v)) is not an http(s) URL")
        }
        return u.withoutTrailingSlash
    }

    /// A key or token that goes into requests as it is (a header placement writes it raw): what no token service
    /// may hand out (``TokenSyntax``) is refused from the configuration too, without quoting it.
    mutating func sendableToken(_ key: String, credential name: String, type: String) throws(ConfigError) -> String {
        let v = try required(key, credential: name, type: type)
        if let why = TokenSyntax.arcgisProblem(v) {
            throw ConfigError(key: path + "." + key, line: line(of: key), "the value (not shown): \(why)")
        }
        return v
    }

    /// The `Referer` a token is bound to goes out with every request: the same rule as any injected field.
    func checkedReferer(_ v: String?) throws(ConfigError) -> String? {
        guard let v else { return nil }
        if let why = OutboundHead.fieldProblem(name: "Referer", value: v) {
            throw ConfigError(key: path + ".referer", line: line(of: "referer"), "the value \(why)")
        }
        return v
    }

    /// A list of http(s) URLs.
    mutating func urlList(_ key: String) throws(ConfigError) -> [String] {
        guard let list = try stringArray(key) else { return [] }
        for v in list.values where HTTPURL.parse(v) == nil {
            throw ConfigError(key: path + "." + key, line: list.line, "\(shown(key, v)) is not an http(s) URL")
        }
        return list.values
    }

    /// A file the proxy must be able to read.
    mutating func readablePath(_ key: String) throws(ConfigError) -> String? {
        guard let p = try string(key) else { return nil }
        if access(p, R_OK) != 0 {
            throw ConfigError(
                key: path + "." + key, line: line(of: key), "cannot read \(shown(key, p)): \(lastErrorString())")
        }
        return p
    }
}

extension TableReader {
    /// An RFC 3339 date-time, written as a TOML date-time (`2027-05-01T00:00:00Z`) or a string, in milliseconds since
    /// the epoch.
    mutating func dateTime(_ k: String) throws(ConfigError) -> Int64? {
        guard let n = table[k] else {
            markUsed(k)
            return nil
        }
        let text: String
        switch n.value {
        case .datetime(let d):
            markUsed(k)
            text = d
        case .string: text = try string(k) ?? ""
        default:
            markUsed(k)
            throw ConfigError(key: key(k), line: n.line, "expected an RFC 3339 date-time")
        }
        guard let ms = parseRFC3339(text) else {
            throw ConfigError(
                key: key(k), line: n.line,
                "\(shown(k, text)) is not an RFC 3339 date-time like 2027-05-01T00:00:00Z (with a time zone)")
        }
        return ms
    }
}
