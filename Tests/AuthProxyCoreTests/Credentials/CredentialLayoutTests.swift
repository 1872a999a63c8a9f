import Testing

@testable import AuthProxyCore

/// A credential is copied into every plan and exchange that uses it: its inline size is kept small (large
/// settings live behind a reference, `indirect`), or every request pays a memcpy of them.
@Suite struct CredentialLayoutTests {
    @Test func aCredentialStaysSmallToCopy() {
        let sizes = [
            "arcgis": MemoryLayout<ArcGISTokenSettings>.size, "app": MemoryLayout<OAuthAppSettings>.size,
            "user": MemoryLayout<OAuthUserSettings>.size, "oauth2": MemoryLayout<OAuth2Settings>.size,
            "trust": MemoryLayout<ServerTrustSettings>.size, "password": MemoryLayout<PasswordSettings>.size,
            "kerberos": MemoryLayout<KerberosSettings>.size, "cert": MemoryLayout<ClientCertificateSettings>.size,
        ]
        #expect(
            MemoryLayout<any CredentialKind>.size <= 64,
            "a credential's kind is \(MemoryLayout<any CredentialKind>.size) bytes: \(sizes)")
        #expect(MemoryLayout<Credential>.size <= 160, "Credential is \(MemoryLayout<Credential>.size) bytes")
    }
}
