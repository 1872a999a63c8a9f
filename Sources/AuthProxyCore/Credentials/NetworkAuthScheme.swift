/// Which authentication scheme answers an upstream's 401 challenge, for metrics and the status page: the most
/// secure scheme the server offers that the exchange's network credential can use, in libcurl's order of
/// preference (Negotiate, NTLM, Digest, Basic).
enum NetworkAuthScheme {
    /// The schemes named in `WWW-Authenticate` values, lower case, in order, once each (parsed by
    /// ``AuthChallenge``, the RFC 9110 challenge parser).
    static func offered(_ values: [String]) -> [String] {
        var out: [String] = []
        for c in AuthChallenge.parse(fields: values) where !out.contains(c.scheme.lowercased()) {
            out.append(c.scheme.lowercased())
        }
        return out
    }

    /// The scheme the credential answers `offered` with, or nil when it cannot answer any.
    static func answered(offered values: [String], auth: NetworkAuth) -> String? {
        let schemes = offered(values)
        if auth.kerberos != nil, schemes.contains("negotiate") { return "negotiate" }
        guard let p = auth.password else { return nil }
        for s in [PasswordScheme.ntlm, .digest, .basic] where p.schemes.contains(s) && schemes.contains(s.rawValue) {
            return s.rawValue
        }
        return nil
    }
}
