/// `[[app]]`: web apps using `/proxy`, each limited to the credentials it serves, optionally only for signed-in
/// users (``WebApp``).
extension ConfigLoader {
    func parseApps(_ entries: [TableReader], credentials: [Credential]) throws(ConfigError) -> [WebApp] {
        let known = Set(credentials.map(\.name))
        var names = Set<String>()
        var owners: [String: String] = [:]
        var out: [WebApp] = []
        for var entry in entries {
            guard let name = try entry.literalString("name"), !name.isEmpty else {
                throw entry.missing("name", "every app needs a name")
            }
            guard names.insert(name).inserted else {
                throw ConfigError(
                    key: entry.path + ".name", line: entry.line(of: "name"), "duplicate app name '\(name)'")
            }
            guard let origins = try entry.stringOrArray("origins"), !origins.values.isEmpty else {
                throw entry.missing("origins", "app '\(name)' needs origins = [\"https://app.example.com\"]")
            }
            for origin in origins.values {
                guard origin != "*", let u = HTTPURL.parse(origin), u.target.pathAndQuery == "/", !origin.hasSuffix("/")
                else {
                    throw ConfigError(
                        key: entry.path + ".origins", line: origins.line,
                        "\(entry.shown("origins", origin)) is not an origin like https://maps.example.com (scheme, host, optional port; no path, no *)"
                    )
                }
                if let other = owners.updateValue(name, forKey: origin.lowercased()) {
                    throw ConfigError(
                        key: entry.path + ".origins", line: origins.line,
                        "origin \(origin) is already app '\(other)''s: an origin selects one app")
                }
            }
            let own = try appCredentials(&entry, known: known, "app '\(name)'")
            var signIn: SignInPolicy? = nil
            if let issuer = try entry.string("sign_in_issuer") {
                guard let u = HTTPURL.parse(issuer), u.target.scheme == "https" || u.target.scheme == "http" else {
                    throw ConfigError(
                        key: entry.path + ".sign_in_issuer", line: entry.line(of: "sign_in_issuer"),
                        "not an http(s) URL: the issuer exactly as its tokens' iss says (e.g. https://idp.example.com/realms/gis)"
                    )
                }
                guard let audiences = try entry.stringOrArray("sign_in_audience"), !audiences.values.isEmpty else {
                    throw entry.missing(
                        "sign_in_audience",
                        "app '\(name)' needs sign_in_audience (its client id at the identity provider)")
                }
                let skew = try entry.int("clock_skew_seconds", range: 0...600) ?? 60
                var rules: [UserRule] = []
                for var rule in try entry.tableArray("user_rule") ?? [] {
                    guard let claim = try rule.literalString("claim"), !claim.isEmpty else {
                        throw rule.missing(
                            "claim", "a user_rule needs the claim to look at (e.g. groups, realm_access.roles)")
                    }
                    guard let value = try rule.literalString("value") else {
                        throw rule.missing("value", "a user_rule needs the value the claim must hold")
                    }
                    let creds = try appCredentials(&rule, known: known, "a user_rule of app '\(name)'")
                    try rule.finish()
                    rules.append(UserRule(claim: claim, value: value, credentials: creds))
                }
                signIn = SignInPolicy(
                    issuer: issuer, audiences: audiences.values, clockSkewSeconds: skew, rules: rules)
            } else {
                for k in ["sign_in_audience", "clock_skew_seconds", "user_rule"] where entry.line(of: k) != nil {
                    throw ConfigError(key: entry.path + "." + k, line: entry.line(of: k), "only with sign_in_issuer")
                }
            }
            try entry.finish()
            out.append(WebApp(name: name, origins: origins.values, credentials: own, signIn: signIn))
        }
        return out
    }

    /// The `credentials` of an app or a user rule: required (`[]` for none), every name a defined credential.
    private func appCredentials(_ entry: inout TableReader, known: Set<String>, _ what: String) throws(ConfigError)
        -> [String]
    {
        guard let list = try entry.stringArray("credentials") else {
            throw entry.missing(
                "credentials", "\(what) needs credentials = [...] (the credentials it may use; [] for none)")
        }
        for c in list.values where !known.contains(c) {
            throw ConfigError(
                key: entry.path + ".credentials", line: list.line,
                "\(what) names credential \(entry.shown("credentials", c)), which is not defined")
        }
        return list.values
    }
}
