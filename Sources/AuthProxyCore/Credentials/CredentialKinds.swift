/// Every credential kind the configuration accepts: `type = "…"` is looked up here. A new kind adds one line.
enum CredentialKinds {
    static let all: [any CredentialKind.Type] = [
        APIKeySettings.self,
        PregeneratedToken.self,
        ArcGISTokenSettings.self,
        OAuthAppSettings.self,
        OAuthUserSettings.self,
        OAuth2Settings.self,
        HeaderSettings.self,
        QueryKind.self,
        ServerTrustSettings.self,
        PasswordSettings.self,
        KerberosSettings.self,
        ClientCertificateSettings.self,
        AWSSigV4Kind.self,
        AzureSASKind.self,
    ]

    /// The kind for `type = name`.
    static func named(_ name: String) -> (any CredentialKind.Type)? {
        all.first { $0.typeName == name }
    }

    /// The accepted `type` values, for the error that lists them.
    static var names: [String] { all.map { $0.typeName } }
}
