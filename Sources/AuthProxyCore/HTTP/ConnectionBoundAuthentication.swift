/// Authentication schemes that authenticate the TCP connection rather than each request.
///
/// NTLM (and Negotiate, which IIS keeps per connection by default, and which may carry NTLM inside) is a
/// handshake over several requests on one connection; once it succeeds the *connection* is the user's, and
/// later requests on it carry no `Authorization` at all. A proxy that pools upstream connections must then never
/// give that connection to another client: the other client would be served as the user. Nor can a client's
/// handshake be spread over pooled connections, since each step must reach the same one.
///
/// So a client connection that sends such an `Authorization` itself (no credential of the proxy answers for it)
/// gets upstream connections of its own from then on, closed with it (see ``OwnUpstreams``).
enum ConnectionBoundAuthentication {
    /// Whether a request with these fields starts or continues a connection-bound handshake.
    static func starts(_ headers: HTTPHeaders) -> Bool {
        // No array of values: this runs for every request forwarded.
        headers.fields.contains { $0.name.caseInsensitiveEquals("authorization") && isConnectionBound($0.value) }
    }

    /// Whether an `Authorization` value uses NTLM or Negotiate (scheme names are case-insensitive).
    static func isConnectionBound(_ value: String) -> Bool {
        let scheme = value.authorizationScheme().scheme
        return scheme.caseInsensitiveEquals("ntlm") || scheme.caseInsensitiveEquals("negotiate")
    }

    /// Whether the client authenticates itself to the server: an `Authorization` with any scheme but `Bearer`
    /// (a bearer token is a token credential's concern). Such a request gets no password or Kerberos credential
    /// of the proxy: the client's own header and libcurl's answer would contradict each other (seen: a client's
    /// NTLM beside the proxy's NTLM gave 401, a client's Basic overrode the configured user, a client's
    /// Negotiate lost to the proxy's Kerberos identity).
    static func clientAuthenticates(_ headers: HTTPHeaders) -> Bool {
        headers.fields.contains { f in
            guard f.name.caseInsensitiveEquals("authorization") else { return false }
            let scheme = f.value.authorizationScheme().scheme
            return !scheme.isEmpty && !scheme.caseInsensitiveEquals("bearer")
        }
    }
}
