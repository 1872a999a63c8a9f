import Dispatch
import Logging

/// Keeps `oauth-user` sign-ins alive: the refresh token of `authproxy login` expires (two weeks on ArcGIS), and the
/// portal swaps it for a new one with `grant_type=exchange_refresh_token`. The state file's watcher tick (once a
/// second, whether requests come or not) asks ``SignInRenewal`` whether an exchange is due; the exchange goes through
/// the store's fencing (``TokenStore/claimExchange(_:done:)``) so a fleet exchanges a refresh token once, and its
/// result is saved atomically (state file, Redis) as a new refresh token of the same sign-in: access tokens and
/// shared slots stay valid. Everything here runs on the service queue.
extension TokenService {
    /// The `oauth-user` credentials of `credentials`, by name.
    static func signInCredentials(_ credentials: [Credential]) -> [String: Credential] {
        var out: [String: Credential] = [:]
        for c in credentials {
            if c.kind is OAuthUserSettings { out[c.name] = c }
        }
        return out
    }

    /// When the refresh token of each signed-in `oauth-user` credential expires, when the proxy exchanges it, and
    /// why it cannot when the portal refused (``CredentialExpiry``). Any thread.
    public func signInExpiries() -> [CredentialExpiry] {
        signInExpiryView.withLock { $0 }
    }

    /// For `authproxy check`: one line per `oauth-user` sign-in in the state file `contents` that belongs to the
    /// credential configured now — when its refresh token expires and when the proxy exchanges it. Never the token.
    public static func signInSummaries(_ contents: TokenStateFile.Contents, credentials: [Credential]) -> [String] {
        let now = nowMillis()
        return credentials.compactMap { c -> String? in
            guard c.kind is OAuthUserSettings,
                let r = contents.refreshTokens.first(where: {
                    $0.credential == c.name && $0.fingerprint == Crypto.sha256Hex(c.identityMaterial)
                })
            else { return nil }
            let user = r.username.map { " (\($0))" } ?? ""
            guard let expires = r.expires else {
                return "sign-in of '\(c.name)'\(user): the refresh token does not expire"
            }
            let due = SignInRenewal.dueAt(issued: r.issued, expires: expires)
            return "sign-in of '\(c.name)'\(user): refresh token expires \(rfc3339(millis: expires)) "
                + "(in \(StatusPage.duration(max(0, expires - now) / 1000))); a running proxy exchanges it from "
                + "\(rfc3339(millis: due))"
        }
    }

    /// The watcher's tick: exchanges the refresh tokens that are due.
    func renewSignIns() {
        dispatchPrecondition(condition: .onQueue(queue))
        let now = clock.nowMillis()
        for name in signIns.keys.sorted() {
            guard let c = signIns[name], let o = c.kind as? OAuthUserSettings, let current = refreshTokens[name],
                sharedGrants[name] != .some(nil)  // the fleet's store says signed out
            else { continue }
            let renewal = (renewals[name] ?? SignInRenewal()).about(current.refreshToken)
            renewals[name] = renewal
            guard renewal.decide(issued: current.issued, expires: current.expires, now: now) == .exchange else {
                continue
            }
            // Another process on this host (a `login`, a proxy sharing the state directory) may have renewed it.
            reloadIfChanged()
            guard refreshTokens[name]?.refreshToken == current.refreshToken else { continue }
            exchange(c, o, current)
        }
        publishSignInExpiries()
    }

    private func exchange(_ c: Credential, _ o: OAuthUserSettings, _ current: TokenStateFile.StoredRefreshToken) {
        renewals[c.name]?.started()
        tokenStore.claimExchange(current) { [self] claim in
            switch claim {
            case .busy:
                renewals[c.name]?.deferred(now: clock.nowMillis())
            case .superseded:
                // Takes over the store's refresh token, learns of a new sign-in, or of a sign-out (then the tick
                // skips the credential until someone signs in again).
                renewals[c.name]?.dropped()
                _ = currentSignIn(name: c.name)
            case .exchange(let lease):
                logger.info(
                    "exchanging the sign-in's refresh token before it expires",
                    metadata: [
                        "credential": "\(c.name)",
                        "expires_in_s": "\(current.expires.map { ($0 - clock.nowMillis()) / 1000 } ?? -1)",
                    ])
                fetcher.exchangeRefreshToken(c, o, refreshToken: current.refreshToken) { [self] result in
                    exchanged(c, current, lease: lease, result: result)
                }
            }
            publishSignInExpiries()
        }
    }

    private func exchanged(
        _ c: Credential, _ current: TokenStateFile.StoredRefreshToken, lease: TokenLease?,
        result: Result<TokenFetcher.ExchangedRefreshToken, TokenError>
    ) {
        dispatchPrecondition(condition: .onQueue(queue))
        let now = clock.nowMillis()
        defer { publishSignInExpiries() }
        guard case .success(let new) = result else {
            if let lease { tokenStore.abandonExchange(current, lease: lease) }
            if case .failure(let e) = result { exchangeFailed(c, current, e, now: now) }
            return
        }
        let record = TokenStateFile.StoredRefreshToken(
            credential: c.name, fingerprint: current.fingerprint, refreshToken: new.refreshToken, expires: new.expires,
            username: current.username, issued: now, grant: current.signIn)
        if tokenStore.finishExchange(current, exchanged: record, lease: lease) == false {
            // Another replica's exchange (or a new sign-in, or a sign-out) got into the store first: that one holds.
            renewals[c.name]?.dropped()
            logger.info(
                "the fleet's store has another refresh token for this sign-in now: using that one",
                metadata: ["credential": "\(c.name)"])
            _ = currentSignIn(name: c.name)
            return
        }
        guard refreshTokens[c.name]?.signIn == current.signIn else {
            // `login` or `signout` changed the sign-in while the exchange ran: theirs wins.
            renewals[c.name]?.dropped()
            return
        }
        renewals[c.name] = SignInRenewal().about(new.refreshToken)
        saveRenewedRefreshToken(record, replacing: current)
        logger.notice(
            "refresh token exchanged: the sign-in continues",
            metadata: [
                "credential": "\(c.name)",
                "expires_in_s": "\(new.expires.map { ($0 - now) / 1000 } ?? -1)",
                "next_exchange_in_s":
                    "\(new.expires.map { (SignInRenewal.dueAt(issued: now, expires: $0) - now) / 1000 } ?? -1)",
            ])
    }

    /// A failed exchange: a refusal is an error that names the credential, the way out and the time left; an outage
    /// is tried again with backoff. The refresh token itself never appears.
    private func exchangeFailed(
        _ c: Credential, _ current: TokenStateFile.StoredRefreshToken, _ e: TokenError, now: Int64
    ) {
        let left =
            current.expires.map { $0 > now ? StatusPage.duration(($0 - now) / 1000) : "0s (expired)" }
            ?? "an unknown time"
        let at = current.expires.map { rfc3339(millis: $0) } ?? "unknown"
        if e.refused {
            // Another process may have exchanged it first (a portal that invalidates the old one refuses it then).
            reloadIfChanged()
            if let latest = currentSignIn(name: c.name), latest.refreshToken != current.refreshToken {
                renewals[c.name]?.dropped()
                return
            }
            let message =
                "Credential '\(c.name)': the portal refused to exchange the refresh token of the last `authproxy login` "
                + "(\(e.message)); the sign-in ends in \(left) (\(at)) unless it is renewed: sign in again with "
                + "`authproxy login --config <file> --credential \(c.name)`"
            let wait =
                renewals[c.name]?.refusedBy(message, issued: current.issued, expires: current.expires ?? now, now: now)
                ?? 0
            logger.error(
                "refresh token exchange refused: the sign-in will lapse",
                metadata: [
                    "credential": "\(c.name)", "cause": "\(e.message)", "expires_in": "\(left)", "expires_at": "\(at)",
                    "retry_in_s": "\(wait / 1000)",
                    "hint": "sign in again with `authproxy login --config <file> --credential \(c.name)`",
                ])
        } else {
            let message =
                "Credential '\(c.name)': the refresh token exchange failed (\(e.message)); it is tried again, and the "
                + "sign-in ends in \(left) (\(at)) if it keeps failing"
            let wait = renewals[c.name]?.failed(message, now: now) ?? 0
            logger.warning(
                "refresh token exchange failed: trying again",
                metadata: [
                    "credential": "\(c.name)", "cause": "\(e.message)", "expires_in": "\(left)",
                    "retry_in_s": "\(wait / 1000)",
                ])
        }
    }

    /// The answer to a refresh grant said when the refresh token `spent` expires, and may have carried a new one: the
    /// stored sign-in follows (a new refresh token continues the same sign-in).
    func renewedByRefreshGrant(_ c: Credential, spent: String, refreshToken: String?, expires: Int64) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let current = refreshTokens[c.name], current.refreshToken == spent else { return }
        let value = refreshToken.flatMap { $0.isEmpty ? nil : $0 } ?? spent
        guard value != spent || current.expires != expires else { return }
        var record = current
        record.refreshToken = value
        record.expires = expires
        if value != spent {
            record.grant = current.signIn
            record.issued = clock.nowMillis()
            if tokenStore.finishExchange(current, exchanged: record, lease: nil) == false {
                _ = currentSignIn(name: c.name)
                return
            }
        }
        saveRenewedRefreshToken(record, replacing: current)
        publishSignInExpiries()
    }

    /// Rebuilds what ``signInExpiries()`` reads.
    func publishSignInExpiries() {
        dispatchPrecondition(condition: .onQueue(queue))
        var list: [CredentialExpiry] = []
        for name in signIns.keys.sorted() {
            guard let r = refreshTokens[name], let expires = r.expires, sharedGrants[name] != .some(nil) else {
                continue
            }
            let renewal = (renewals[name] ?? SignInRenewal()).about(r.refreshToken)
            var e = CredentialExpiry(credential: name, what: .refreshToken, expires: expires)
            e.renews = renewal.renewsAt(issued: r.issued, expires: expires)
            e.problem = renewal.lastError
            list.append(e)
        }
        signInExpiryView.withLock { $0 = list }
    }
}
