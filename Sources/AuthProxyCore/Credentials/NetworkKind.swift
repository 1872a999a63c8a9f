/// A kind that acts on connections (``CredentialRole/network(_:)``): it contributes its settings to the
/// ``NetworkAuth`` of the requests it matches, which the connection layer (libcurl options, the TLS context)
/// applies. That layer names each network kind's settings: a handshake libcurl answers or a TLS setting is not a
/// change to the request, so it cannot go through ``CredentialKind/apply(_:to:)``.
protocol NetworkKind: CredentialKind {
    func contribute(to network: inout NetworkAuth, credential name: String)
}
