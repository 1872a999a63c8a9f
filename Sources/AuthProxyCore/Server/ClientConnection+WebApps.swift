import Dispatch
import Logging

/// `[[app]]` sign-in on `/proxy`: the user's bearer token checked (``SignInCheck``) against the issuer's keys
/// (``SignInKeys``), which are fetched off the loop while the request waits.
extension ClientConnection {
    /// The credentials app `i`'s request may use, or nil when it has been answered (401, 503) or waits for the
    /// issuer's keys (then ``serveProxyEndpoint(_:afterKeyFetch:)`` runs again). The user's `Authorization` field
    /// is taken off the request: it was for the proxy, and the credential puts its own.
    func webAppCredentials(app i: Int, target: String, afterKeyFetch: Bool) -> CredentialStore? {
        let access = context.access.apps
        let app = access.app(i)
        guard let policy = app.signIn else { return access.store(app: i, rule: nil) }
        guard let x = ex, let h = x.head else { return nil }
        x.varyAuthorization = true
        let registry = context.shared.signInKeys
        let cached = registry.cached(policy, logger: logger, now: now)
        let verdict = SignInCheck.verdict(
            authorization: h.headers.first("authorization"), policy: policy, keys: cached.keys,
            afterFetch: afterKeyFetch, now: SystemWallClock().nowMillis() / 1000)
        switch verdict {
        case .admitted(let rule):
            x.head?.headers.remove(name: "authorization")
            return access.store(app: i, rule: rule)
        case .needKeys:
            guard let serial = machine.routeRequested() else { return nil }
            let me = LoopBound(self, queue: loop.queue)
            registry.fetch(policy, logger: logger) {
                me.queue.async {
                    guard me.value.machine.awaitsRoute(serial: serial) else { return }
                    me.value.serveProxyEndpoint(target, afterKeyFetch: true)
                    me.value.run(me.value.machine.continuationAfterCallback)
                }
            }
            return nil
        case .missing, .refused:
            if cached.keys == nil, afterKeyFetch, case .refused = verdict {
                // Not the user's fault: the tokens cannot be checked at all.
                respond(
                    ErrorResponse(
                        status: 503, message: "The sign-in of app \(app.name) cannot be checked now",
                        details: [
                            "The signing keys of \(policy.issuer) could not be fetched: \(cached.error ?? "unknown error")."
                        ], retryAfter: 10), close: false)
                return nil
            }
            if case .refused(let why) = verdict,
                let held = context.access.throttle.admit("sign-in:\(app.name)", now: now)
            {
                logger.warning(
                    "sign-in token refused",
                    metadata: [
                        "app": "\(app.name)", "reason": "\(why)", "client": "\(peer)",
                        "refused_since_last_report": "\(held)",
                    ])
            }
            var details = [
                "Send the signed-in user's token (the ID token, or an access token for \(policy.audiences.joined(separator: " or "))) as Authorization: Bearer <token>."
            ]
            if case .refused(let why) = verdict { details.insert("Refused: \(why).", at: 0) }
            respond(
                ErrorResponse(
                    status: 401,
                    message: verdict == .missing
                        ? "App \(app.name) requires sign-in" : "The sign-in token was not accepted",
                    details: details),
                close: false,
                extraHeaders: "WWW-Authenticate: \(SignInCheck.challenge(verdict))\r\n"
                    + "Access-Control-Expose-Headers: WWW-Authenticate\r\n")
            return nil
        }
    }
}
