import Foundation

/// The OAuth 2.0 authorization-code flow with PKCE for `oauth-user` credentials, and token revocation.
public struct OAuthLogin: AuthorizationCodeFlow, Sendable {
    public let credential: Credential
    public let settings: OAuthUserSettings
    /// PKCE verifier (43 characters of base64url) and its S256 challenge.
    public let verifier: String
    public let state: String

    public init(credential: Credential) throws(StateError) {
        guard let s = credential.kind as? OAuthUserSettings else {
            throw StateError(
                "credential '\(credential.name)' is of type \(credential.kind.typeName); login is for oauth-user credentials"
            )
        }
        self.credential = credential
        settings = s
        verifier = base64url(Crypto.random(32))
        state = base64url(Crypto.random(16))
    }

    public var challenge: String { base64url(Crypto.sha256(Array(verifier.utf8))) }

    public var isOutOfBand: Bool { settings.redirectURI == "urn:ietf:wg:oauth:2.0:oob" }

    public var authorizeURL: String {
        ServerRoot.sharingRest(settings.portalURL) + "/oauth2/authorize?"
            + TokenInjection.formEncoded([
                ("client_id", settings.clientID), ("response_type", "code"), ("redirect_uri", settings.redirectURI),
                ("code_challenge", challenge), ("code_challenge_method", "S256"), ("state", state),
            ])
    }

    /// The loopback port of an `http://127.0.0.1:PORT/...` (or localhost) redirect URI.
    public var loopbackPort: Int? { AuthProxyCore.loopbackPort(of: settings.redirectURI) }

    public struct Grant: Sendable {
        public var refreshToken: String
        public var refreshExpires: Int64?
        public var username: String?
    }

    /// Exchanges the authorization code for tokens.
    public func exchange(code: String, fetch: SyncFetch) throws(StateError) -> Grant {
        let url = ServerRoot.sharingRest(settings.portalURL) + "/oauth2/token"
        let r = try fetch.post(
            url,
            form: [
                ("grant_type", "authorization_code"), ("client_id", settings.clientID), ("code", code),
                ("redirect_uri", settings.redirectURI), ("code_verifier", verifier), ("f", "json"),
            ])
        return try Self.grant(fromAnswer: r.body, status: r.status)
    }

    /// Reads the portal's answer to the authorization-code grant. Only an error object is a refusal (its OAuth
    /// description first); an answer without a refresh token is an error too.
    static func grant(fromAnswer body: [UInt8], status: Int) throws(StateError) -> Grant {
        let data = Data(body)
        guard let answer = try? JSONDecoder().decode(OAuthTokenResponse.self, from: data),
            let refusal = try? JSONDecoder().decode(ErrorMemberResponse.self, from: data)
        else {
            throw StateError("the portal answered HTTP \(status) without JSON")
        }
        if let e = refusal.error, e.isObject {
            throw StateError("the portal refused the code: \(e.errorDescription ?? e.messageMember ?? "error")")
        }
        guard let refresh = answer.refreshToken else {
            throw StateError("the portal returned no refresh_token")
        }
        return Grant(
            refreshToken: refresh,
            refreshExpires: OAuthTokenResponse.refreshExpiry(answer.refreshTokenExpiresIn, now: nowMillis()),
            username: answer.username)
    }

    /// Extracts `code` (checking `state`) from a callback request target like `/callback?code=…&state=…`.
    public func code(fromCallback target: String) throws(StateError) -> String {
        try Self.code(fromCallback: target, state: state)
    }

    static func code(fromCallback target: String, state: String) throws(StateError) -> String {
        guard let q = target.firstIndex(of: "?") else { throw StateError("the redirect carried no code") }
        var fields: [String: String] = [:]
        for pair in target[target.index(after: q)...].split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1)
            fields[String(kv[0])] = kv.count > 1 ? percentDecoded(String(kv[1])) : ""
        }
        if let e = fields["error"] { throw StateError("the portal refused: \(e) \(fields["error_description"] ?? "")") }
        guard fields["state"] == state else { throw StateError("the redirect's state does not match this login") }
        guard let code = fields["code"], !code.isEmpty else { throw StateError("the redirect carried no code") }
        return code
    }
}

/// Revokes a token at a portal (`oauth2/revokeToken`).
public func revokeToken(portalURL: String, clientID: String, token: String, hint: String, fetch: SyncFetch)
    throws(StateError)
{
    let url = ServerRoot.sharingRest(portalURL) + "/oauth2/revokeToken"
    let r = try fetch.post(
        url,
        form: [
            ("client_id", clientID), ("auth_token", token), ("token", token),
            ("token_type_hint", hint), ("f", "json"),
        ])
    if let answer = try? JSONDecoder().decode(ErrorMemberResponse.self, from: Data(r.body)), let e = answer.error,
        e.isObject
    {
        throw StateError("the portal refused to revoke: \(e.messageMember ?? e.errorDescription ?? "error")")
    }
    guard r.status < 400 else { throw StateError("the portal answered HTTP \(r.status)") }
}

func base64url(_ bytes: [UInt8]) -> String {
    Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        .replacingOccurrences(of: "=", with: "")
}

func percentDecoded(_ s: String) -> String {
    (s.replacingOccurrences(of: "+", with: " ").removingPercentEncoding) ?? s
}
