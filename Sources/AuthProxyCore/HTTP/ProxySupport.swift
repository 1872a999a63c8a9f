/// `Proxy-Support: Session-Based-Authentication` (RFC 4559 §6, as Squid and Microsoft's proxies send it) on a
/// relayed 401 that offers a connection-bound login.
///
/// .NET's HTTP stack (ArcGIS Pro, PowerShell, every `HttpClient`) answers an NTLM or Negotiate challenge from an
/// `http://` origin reached through a proxy only when the proxy says it keeps the client's connection to the origin
/// for the whole handshake (`AuthenticationHelper.NtAuth`: `ProxySupportsConnectionAuth`). authproxy does: a client
/// that logs in itself gets upstream connections of its own (``ConnectionBoundAuthentication``). Without the field
/// such a client gives up at the first 401. `Connection: Proxy-Support` marks it as this hop's, as Squid does.
enum ProxySupport {
    /// Written after the relayed fields.
    static let fields = "Proxy-Support: Session-Based-Authentication\r\nConnection: Proxy-Support\r\n"

    /// Whether a response with `status` and these `WWW-Authenticate` values gets ``fields``: a 401 that offers
    /// NTLM, Negotiate or Kerberos. Called only for 401s (the check on the status comes first on the relay path).
    static func applies(status: Int, wwwAuthenticate: [String]) -> Bool {
        guard status == 401 else { return false }
        return AuthChallenge.parse(fields: wwwAuthenticate).contains {
            $0.is("ntlm") || $0.is("negotiate") || $0.is("kerberos")
        }
    }
}
