import Dispatch
import Logging

/// The state file: saved tokens survive a restart, and a running proxy follows what `authproxy login` and
/// `signout` (other processes) change in it. Everything here runs on the service queue, except
/// ``TokenService/storeRefreshToken(_:config:refreshToken:expires:username:)``, which the CLI calls.
extension TokenService {
    /// Loads saved tokens that still belong to an unchanged credential. Call once before serving.
    ///
    /// A damaged file is renamed aside (with a warning) and serving starts empty; a wrong `state_key` or an
    /// unreadable file throws, so the proxy never starts with a state it would overwrite.
    public func loadState() throws(StateError) {
        let loaded = try queue.sync { () -> Result<TokenStoreLoad, StateError> in
            do throws(StateError) { return .success(try tokenStore.load()) } catch { return .failure(error) }
        }.get()
        if let aside = loaded.quarantined {
            logger.warning(
                "token state file is damaged: renamed it aside and starting without saved tokens",
                metadata: [
                    "file": "\(tokenStore.location)", "renamed_to": "\(aside)",
                    "cause": "\(loaded.damage.map { "\($0)" } ?? "")",
                ])
        }
        let contents = loaded.contents
        let saved = queue.sync {
            let saved = contents.tokens.filter { fingerprints[$0.credential] == $0.fingerprint }
            let stored = contents.refreshTokens.filter { fingerprints[$0.credential] == $0.fingerprint }
            cache.withLock { cache in
                for t in saved { cache.adopt(key: t.key, credential: t.credential, token: t.token) }
            }
            for r in stored { refreshTokens[r.credential] = r }
            startWatching()
            return saved
        }
        if !saved.isEmpty {
            logger.notice(
                "restored tokens from state", metadata: ["count": "\(saved.count)", "file": "\(tokenStore.location)"])
        }
    }

    /// Checks the state file once a second: `authproxy login` and `signout` (other processes) change it,
    /// and a running proxy must follow without a restart. The same tick exchanges the refresh tokens of sign-ins
    /// that are due (``renewSignIns()``): an idle proxy must not let a sign-in lapse.
    private func startWatching() {
        dispatchPrecondition(condition: .onQueue(queue))
        let t = DispatchSource.makeTimerSource(queue: queue)
        t.schedule(deadline: .now() + 1, repeating: 1, leeway: .milliseconds(200))
        t.setEventHandler { [weak self] in
            self?.reloadIfChanged()
            self?.renewSignIns()
        }
        t.resume()
        watcher = t
    }

    /// Re-reads the state file when another process replaced it: new or removed refresh tokens take effect
    /// (the access tokens of a user who signed out or signed in again are dropped), and tokens another proxy
    /// saved for keys this one has never used are adopted.
    func reloadIfChanged() {
        dispatchPrecondition(condition: .onQueue(queue))
        switch tokenStore.changes() {
        case nil:
            return
        case .failure(let error):
            logger.error(
                "cannot re-read the token state file changed by another process; keeping the tokens in memory",
                metadata: ["file": "\(tokenStore.location)", "cause": "\(error)"])
        case .success(let contents):
            follow(contents)
        }
    }

    /// Takes over what another process put in the state file (`contents`, as read now).
    func follow(_ contents: TokenStateFile.Contents) {
        var current: [String: TokenStateFile.StoredRefreshToken] = [:]
        for r in contents.refreshTokens where fingerprints[r.credential] == r.fingerprint { current[r.credential] = r }
        for name in oauthUsers where current[name]?.signIn != refreshTokens[name]?.signIn {
            // Signed out, or signed in again (perhaps as another user): tokens from the old grant must go. An
            // exchanged refresh token continues its sign-in (same ``signIn``) and keeps them.
            cache.withLock { $0.grantChanged(credential: name) }
            logger.notice(
                current[name] == nil
                    ? "refresh token removed by another process" : "new refresh token from another process",
                metadata: ["credential": "\(name)"])
        }
        for (name, mine) in refreshTokens {
            // The same sign-in, renewed here after the file was read (its save failed, or is about to happen): the
            // newer refresh token is kept, never the one it replaced.
            if let theirs = current[name], theirs.signIn == mine.signIn, (mine.expires ?? 0) > (theirs.expires ?? 0) {
                current[name] = mine
            }
        }
        refreshTokens = current
        let now = clock.nowMillis()
        let oauthUsers = oauthUsers
        let valid = contents.tokens.filter { t in
            fingerprints[t.credential] == t.fingerprint && !t.token.isExpired(at: now)
                && !(oauthUsers.contains(t.credential) && current[t.credential] == nil)
        }
        // Only for keys this proxy has never used (``TokenCache/adopt(key:credential:token:)``).
        cache.withLock { cache in
            for t in valid { cache.adopt(key: t.key, credential: t.credential, token: t.token) }
        }
    }

    /// Saves the valid tokens (read-modify-write under the file lock, so a concurrent `login` or `signout`
    /// is never undone). A file that cannot be read is not overwritten.
    func persist() {
        dispatchPrecondition(condition: .onQueue(queue))
        reloadIfChanged()  // a sign-out that just happened must not be written back
        let now = clock.nowMillis()
        let fingerprints = fingerprints
        let ours = cache.withLock { $0.validTokens(now: now) }.map {
            TokenStateFile.StoredToken(
                key: $0.key, credential: $0.credential,
                fingerprint: fingerprints[$0.credential] ?? "", token: $0.token)
        }
        let keys = Set(ours.map(\.key))
        let oauthUsers = oauthUsers
        let grants = refreshTokens.mapValues(\.signIn)
        do {
            let result = try tokenStore.update { (contents: inout TokenStateFile.Contents) throws(StateError) in
                // A user signed out, or in again, between our last look and the lock: the tokens we hold
                // for them belong to the old grant and must not be written back.
                var inFile: [String: String] = [:]
                for r in contents.refreshTokens where fingerprints[r.credential] == r.fingerprint {
                    inFile[r.credential] = r.signIn
                }
                let mine = ours.filter {
                    !oauthUsers.contains($0.credential)
                        || (inFile[$0.credential] != nil && inFile[$0.credential] == grants[$0.credential])
                }
                contents.tokens =
                    contents.tokens.filter { !keys.contains($0.key) && fingerprints[$0.credential] == $0.fingerprint }
                    + mine
                contents.tokens.sort { $0.key < $1.key }
                // Refresh tokens in the file are left as they are (`login` and `signout` own them).
            }
            follow(result.contents)  // what another writer changed just before the lock
            if let aside = result.quarantined {
                logger.warning(
                    "token state file was damaged: renamed it aside",
                    metadata: ["file": "\(tokenStore.location)", "renamed_to": "\(aside)"])
            }
        } catch {
            logger.error("cannot save token state; the file is left as it is", metadata: ["cause": "\(error)"])
        }
    }

    /// Keeps the refresh token an `oauth2` provider rotated (RFC 9700 §4.14.2): in memory at once, then in the
    /// state file under its lock, bound to the credential's settings (a new seed in proxy.conf wins over it). The old
    /// one must never be spent again — providers with reuse detection revoke the whole grant for that. A rotation
    /// continues the sign-in it came from (``TokenStateFile/StoredRefreshToken/grant``).
    func keepRefreshToken(_ c: Credential, _ value: String) {
        dispatchPrecondition(condition: .onQueue(queue))
        let stored = TokenStateFile.StoredRefreshToken(
            credential: c.name, fingerprint: fingerprints[c.name] ?? Crypto.sha256Hex(c.identityMaterial),
            refreshToken: value, expires: nil, username: refreshTokens[c.name]?.username,
            issued: clock.nowMillis(), grant: refreshTokens[c.name]?.signIn)
        // The fleet first: a replica waiting for the lock reads the shared copy as soon as it has it.
        tokenStore.shareRefreshToken(stored)
        saveRenewedRefreshToken(stored, replacing: nil)
    }

    /// Keeps `stored`, a new refresh token of the sign-in `replacing` had (an exchange, a rotation, or the same one
    /// with a newer expiry): in memory at once, then in the state file under its lock — only while the file still
    /// holds that sign-in (or, `replacing` nil, whatever it holds), so a `login` or `signout` made meanwhile wins. A
    /// restart in the middle goes on with whichever of the two the file holds; the memory copy is never older.
    func saveRenewedRefreshToken(
        _ stored: TokenStateFile.StoredRefreshToken, replacing: TokenStateFile.StoredRefreshToken?
    ) {
        dispatchPrecondition(condition: .onQueue(queue))
        let name = stored.credential
        refreshTokens[name] = stored
        sharedGrants[name] = .some(stored.signIn)
        let fleet = !(tokenStore is FileTokenStore)
        do {
            let result = try tokenStore.update { (contents: inout TokenStateFile.Contents) throws(StateError) in
                let inFile = contents.refreshTokens.first {
                    $0.credential == name && $0.fingerprint == stored.fingerprint
                }
                if let replacing {
                    // A fleet's sign-in may have been made on another machine: this replica's file may not have it.
                    let sameSignIn = inFile.map { $0.signIn == replacing.signIn } ?? fleet
                    guard sameSignIn else { return }
                }
                contents.refreshTokens.removeAll { $0.credential == name }
                contents.refreshTokens.append(stored)
            }
            follow(result.contents)  // what another writer changed just before the lock
        } catch {
            logger.error(
                "cannot save the new refresh token; it is kept in memory only (a restart goes back to the one in the file)",
                metadata: ["credential": "\(name)", "cause": "\(error)"])
        }
    }

    /// Stores a refresh token obtained by `authproxy login`, bound to the credential's current settings
    /// (read-modify-write under the file lock). Returns where a damaged file was moved, if it was.
    @discardableResult
    public static func storeRefreshToken(
        _ c: Credential, config: ProxyConfig, refreshToken: String, expires: Int64?,
        username: String?
    ) throws(StateError) -> String? {
        let file = TokenStateFile(directory: config.stateDir, secret: config.stateKey)
        let stored = TokenStateFile.StoredRefreshToken(
            credential: c.name,
            fingerprint: Crypto.sha256Hex(c.identityMaterial), refreshToken: refreshToken, expires: expires,
            username: username, issued: nowMillis())
        let result = try file.update { (contents: inout TokenStateFile.Contents) throws(StateError) in
            contents.refreshTokens.removeAll { $0.credential == c.name }
            contents.refreshTokens.append(stored)
            // Access tokens from an earlier sign-in of this credential belong to the old grant.
            contents.tokens.removeAll { $0.credential == c.name }
        }
        return result.quarantined
    }
}
