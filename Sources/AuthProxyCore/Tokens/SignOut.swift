/// `authproxy signout`: revokes OAuth tokens at their portal and deletes cached tokens from the state file.
public enum SignOut {
    /// Returns one line per action taken (for the CLI to print). Revocation failures are reported but do not
    /// stop the local deletion.
    public static func run(config: ProxyConfig, credentialName: String?, fetch: SyncFetch) throws(StateError)
        -> [String]
    {
        let selected = config.credentials.filter { credentialName == nil || $0.name == credentialName }
        if let n = credentialName, selected.isEmpty {
            throw StateError("no credential named '\(n)' in the configuration")
        }
        let file = TokenStateFile(directory: config.stateDir, secret: config.stateKey)
        // A wrong key stops here (nothing revoked, nothing written); a damaged file has nothing to revoke and
        // is renamed aside by the update below.
        let contents: TokenStateFile.Contents
        do throws(StateError) {
            contents = try file.load()
        } catch  where error.kind == .damaged {
            contents = TokenStateFile.Contents()
        }
        var report: [String] = []
        let names = Set(selected.map(\.name))
        for c in selected {
            guard let (portal, clientID) = (c.kind as? any FetchedTokenKind)?.revocation else { continue }
            var refresh = contents.refreshTokens.filter { $0.credential == c.name }.map(\.refreshToken)
            if config.cluster != nil, let shared = try ClusterSignIn.refreshToken(c, config: config),
                !refresh.contains(shared)
            {
                refresh.append(shared)  // signed in through another replica's machine: only Redis has it
            }
            for r in refresh {
                do {
                    try revokeToken(
                        portalURL: portal, clientID: clientID, token: r, hint: "refresh_token", fetch: fetch)
                    report.append("\(c.name): refresh token revoked at \(portal)")
                } catch {
                    report.append("\(c.name): could not revoke the refresh token: \(error)")
                }
            }
            for t in contents.tokens where t.credential == c.name {
                do {
                    try revokeToken(
                        portalURL: portal, clientID: clientID, token: t.token.value, hint: "access_token", fetch: fetch)
                } catch {
                    report.append("\(c.name): could not revoke a cached access token: \(error)")
                }
            }
        }
        // Re-read under the lock: a running proxy may have saved tokens while the revocations ran.
        var deleted = 0
        let result = try file.update { (c: inout TokenStateFile.Contents) throws(StateError) in
            let before = c.tokens.count + c.refreshTokens.count
            c.tokens.removeAll { names.contains($0.credential) }
            c.refreshTokens.removeAll { names.contains($0.credential) }
            deleted = before - c.tokens.count - c.refreshTokens.count
        }
        if let aside = result.quarantined {
            report.append("warning: \(file.path) was damaged; renamed it to \(aside)")
        }
        report.append("deleted \(deleted) cached token(s) from \(file.path)")
        if config.cluster != nil {
            // Every replica stops using the sign-in: the notice makes each drop its tokens of that grant at once.
            for c in selected {
                // A portal sign-in the fleet shares (an oauth2 sign-in is each replica's own).
                guard c.signsIn, (c.kind as? any FetchedTokenKind)?.revocation != nil else { continue }
                try ClusterSignIn.store(c, config: config, refreshToken: nil)
                report.append("\(c.name): refresh token deleted from the fleet's Redis ([cluster])")
            }
        }
        return report
    }
}
