/// The `[[app]]` entries of one configuration generation with the credential store each may use: the app's own
/// (`credentials`) and one per `user_rule`, built once so a request only picks one.
final class WebAppAccess: Sendable {
    let directory: WebAppDirectory
    /// `[app][0]`: the app's own credentials; `[app][1 + i]`: those of its rule `i`.
    private let stores: [[CredentialStore]]

    init(apps: [WebApp], credentials: [Credential]) {
        directory = WebAppDirectory(apps)
        func store(_ names: [String]) -> CredentialStore {
            CredentialStore(credentials.filter { names.contains($0.name) })
        }
        stores = apps.map { a in [store(a.credentials)] + (a.signIn?.rules ?? []).map { store($0.credentials) } }
    }

    func app(_ i: Int) -> WebApp { directory.apps[i] }

    /// The credentials of app `i` for a user whom rule `rule` matched (nil: no rule, or no sign-in).
    func store(app i: Int, rule: Int?) -> CredentialStore { stores[i][rule.map { $0 + 1 } ?? 0] }
}
