extension NetworkAuth {
    /// Whether only libcurl can carry the login: NTLM (a password that allows it) and Negotiate (a Kerberos
    /// identity) bind their handshake to libcurl's connection. Basic and Digest go with the own HTTP/1.1 client
    /// (``UpstreamClient/choose(configured:network:route:upstreamScheme:isUpgrade:)``).
    public var needsLibcurl: Bool {
        if case .some(let p) = password, p.bindsToConnection { return true }
        if case .some = kerberos { return true }
        return false
    }
}
