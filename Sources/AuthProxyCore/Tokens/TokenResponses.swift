import Foundation

// What token services and `rest/info` answer, as `Decodable` types.
//
// Every field is read leniently, the way the `JSONSerialization` casts these types replace read it: a member
// of an unexpected type counts as absent instead of failing the whole answer, a number is also accepted
// where a flag is expected (`1`/`0`) and a flag where a number is (`true` is 1), and a fractional number is
// truncated. Two corner cases differ from the old casts: a member named twice counts once (the first, not the
// last), and an integer beyond 64 bits counts as absent instead of wrapping around.

/// A token service's answer: its refusal (in any of the shapes ArcGIS and OAuth services use) or the `Body`
/// it was asked for.
///
/// A refusal is an `error` member of any value — `{"error":{"code":498,…}}` of ArcGIS,
/// `{"error":"invalid_grant"}` of plain OAuth, even `{"error":null}` — or the unwrapped
/// `{"code":498,"message":…}` of ArcGIS Server and older releases (a `code` in an answer carrying neither
/// `token` nor `access_token`). Decoding throws only when the answer is not a JSON object.
enum TokenServiceReply<Body: Decodable>: Decodable {
    case refused(TokenServiceRefusal)
    case answered(Body)

    private enum Keys: String, CodingKey {
        case error, code, token
        case accessToken = "access_token"
    }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Keys.self)
        if c.contains(.error) {
            self = .refused(TokenServiceRefusal(from: try c.superDecoder(forKey: .error)))
        } else if c.contains(.code), !c.contains(.token), !c.contains(.accessToken) {
            self = .refused(TokenServiceRefusal(from: decoder))
        } else {
            self = .answered(try Body(from: decoder))
        }
    }
}

/// Why a token service refused: an ArcGIS error object (`code`, `message`, `messageCode`, `details`), an OAuth
/// error object (`error_description`), a bare string (plain OAuth: `"error":"invalid_grant"`), or any other
/// value.
struct TokenServiceRefusal: Sendable, Equatable {
    var code: Int?
    var messageCode: String?
    /// The `message` member.
    var messageMember: String?
    /// The `error_description` member (OAuth).
    var errorDescription: String?
    /// The error itself when it is a bare string.
    var text: String?
    /// The string entries of `details` (others are skipped).
    var details: [String]
    /// The error is an object, not a bare string or another value.
    var isObject: Bool

    /// For messages: `message`, else `error_description`, else the bare string, else "error".
    var message: String { messageMember ?? errorDescription ?? text ?? "error" }

    /// The service refused the token it was given (498 invalid/expired, 499 required, or GWM_0003 but not with
    /// 403, "no permission"): for a federation exchange, the portal token is dead.
    var rejectsToken: Bool { TokenRejection.ErrorFields.isTokenError(code: code, messageCode: messageCode) }

    private enum Keys: String, CodingKey {
        case code, messageCode, message, details
        case errorDescription = "error_description"
    }

    init(
        code: Int? = nil, messageCode: String? = nil, messageMember: String? = nil, errorDescription: String? = nil,
        text: String? = nil, details: [String] = [], isObject: Bool = true
    ) {
        self.code = code
        self.messageCode = messageCode
        self.messageMember = messageMember
        self.errorDescription = errorDescription
        self.text = text
        self.details = details
        self.isObject = isObject
    }

    /// Never fails: whatever the value is, it is a refusal.
    init(from decoder: any Decoder) {
        guard let c = try? decoder.container(keyedBy: Keys.self) else {
            self.init(text: try? decoder.singleValueContainer().decode(String.self), isObject: false)
            return
        }
        self.init(
            code: c.lenientInt64(.code).map { Int($0) }, messageCode: c.lenientString(.messageCode),
            messageMember: c.lenientString(.message), errorDescription: c.lenientString(.errorDescription),
            details: c.lenientStrings(.details))
    }
}

/// Only the `error` member of an answer (nil when there is none), for callers with their own rule about which
/// error shapes count: `authproxy login` and `signout` (``OAuthLogin``) count only an error object.
struct ErrorMemberResponse: Decodable, Sendable, Equatable {
    var error: TokenServiceRefusal?

    private enum Keys: String, CodingKey { case error }

    init(error: TokenServiceRefusal?) { self.error = error }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Keys.self)
        error = c.contains(.error) ? TokenServiceRefusal(from: try c.superDecoder(forKey: .error)) : nil
    }
}

/// The answer of ArcGIS `generateToken` (with a password, or a portal token and `serverUrl`).
struct GenerateTokenResponse: Decodable, Sendable, Equatable {
    var token: String?
    /// Milliseconds since the epoch.
    var expires: Int64?
    var ssl: Bool

    private enum Keys: String, CodingKey { case token, expires, ssl }

    init(token: String?, expires: Int64?, ssl: Bool) {
        self.token = token
        self.expires = expires
        self.ssl = ssl
    }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Keys.self)
        self.init(token: c.lenientString(.token), expires: c.lenientInt64(.expires), ssl: c.lenientBool(.ssl) ?? false)
    }

    /// The token, obtained at `now`, in an answer dated `serverDate` (the server's clock); nil when the answer
    /// carries none (or an empty one). `expires` is converted to the local clock (``ServerClock``).
    func issuedToken(at now: Int64, serverDate: Int64? = nil) -> IssuedToken? {
        guard let token, !token.isEmpty else { return nil }
        return IssuedToken(
            value: token,
            expires: expires.map { ServerClock.localExpiry(expires: $0, serverDate: serverDate, now: now) },
            issued: now, ssl: ssl, referer: nil)
    }
}

/// The answer of an OAuth 2.0 token endpoint (`oauth2/token`): client-credentials, refresh-token and
/// authorization-code grants.
struct OAuthTokenResponse: Decodable, Sendable, Equatable {
    var accessToken: String?
    /// Seconds from now.
    var expiresIn: Int64?
    var ssl: Bool
    /// Only in the answer to an authorization-code grant.
    var refreshToken: String?
    /// Seconds from now (-1 or absent: never, or unknown).
    var refreshTokenExpiresIn: Int64?
    var username: String?

    private enum Keys: String, CodingKey {
        case ssl, username
        case accessToken = "access_token"
        case expiresIn = "expires_in"
        case refreshToken = "refresh_token"
        case refreshTokenExpiresIn = "refresh_token_expires_in"
    }

    init(
        accessToken: String?, expiresIn: Int64?, ssl: Bool = false, refreshToken: String? = nil,
        refreshTokenExpiresIn: Int64? = nil, username: String? = nil
    ) {
        self.accessToken = accessToken
        self.expiresIn = expiresIn
        self.ssl = ssl
        self.refreshToken = refreshToken
        self.refreshTokenExpiresIn = refreshTokenExpiresIn
        self.username = username
    }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Keys.self)
        self.init(
            accessToken: c.lenientString(.accessToken), expiresIn: c.lenientInt64(.expiresIn),
            ssl: c.lenientBool(.ssl) ?? false, refreshToken: c.lenientString(.refreshToken),
            refreshTokenExpiresIn: c.lenientInt64(.refreshTokenExpiresIn), username: c.lenientString(.username))
    }

    /// When a refresh token with `refresh_token_expires_in` of `seconds` expires, for an answer received at `now`;
    /// nil for none, or for -1 (or 0), which the portal sends for a refresh token that does not expire.
    static func refreshExpiry(_ seconds: Int64?, now: Int64) -> Int64? {
        guard let seconds, seconds > 0 else { return nil }
        return now + seconds * 1000
    }

    /// The access token, obtained at `now`; nil when the answer carries none (or an empty one).
    func issuedToken(at now: Int64) -> IssuedToken? {
        guard let accessToken, !accessToken.isEmpty else { return nil }
        return IssuedToken(
            value: accessToken, expires: expiresIn.map { now + $0 * 1000 }, issued: now, ssl: ssl,
            referer: nil)
    }
}

/// What an ArcGIS Server's `rest/info` says about where it gets tokens from.
///
/// Decoding throws when the answer is not a JSON object or carries an `error` member (of any value): either
/// way it holds no server information.
struct ServerInfoResponse: Decodable, Sendable, Equatable {
    /// `authInfo.tokenServicesUrl`: the server's own token service.
    var tokenServicesURL: String?
    /// `owningSystemUrl`: the portal the server is federated with.
    var owningSystemURL: String?
    /// `authInfo.shortLivedTokenValidity`, in minutes: the lifetime to ask for.
    var shortLivedTokenValidity: Int?
    /// Whether the answer describes an ArcGIS server or portal root (it has `currentVersion`, `authInfo` or
    /// `owningSystemUrl`, as every `rest/info` and `sharing/rest/info` does), not merely some JSON object: what confirms a
    /// root a client's path named before a password is spent on it (``RootConfirmations``).
    var describesRoot = true

    private enum Keys: String, CodingKey {
        case error, authInfo, currentVersion
        case owningSystemURL = "owningSystemUrl"
    }

    private enum AuthInfoKeys: String, CodingKey {
        case tokenServicesURL = "tokenServicesUrl"
        case shortLivedTokenValidity
    }

    init(tokenServicesURL: String? = nil, owningSystemURL: String? = nil, shortLivedTokenValidity: Int? = nil) {
        self.tokenServicesURL = tokenServicesURL
        self.owningSystemURL = owningSystemURL
        self.shortLivedTokenValidity = shortLivedTokenValidity
    }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Keys.self)
        if c.contains(.error) {
            throw DecodingError.dataCorruptedError(
                forKey: .error, in: c, debugDescription: "an error, not server information")
        }
        let auth = try? c.nestedContainer(keyedBy: AuthInfoKeys.self, forKey: .authInfo)
        self.init(
            tokenServicesURL: auth?.lenientString(.tokenServicesURL),
            owningSystemURL: c.lenientString(.owningSystemURL),
            shortLivedTokenValidity: auth?.lenientInt64(.shortLivedTokenValidity).map { Int($0) })
        describesRoot = c.contains(.authInfo) || c.contains(.currentVersion) || c.contains(.owningSystemURL)
    }
}

extension KeyedDecodingContainer {
    /// A string member; absent when it is anything else.
    func lenientString(_ key: Key) -> String? { try? decode(String.self, forKey: key) }

    /// A number member (a fraction truncated toward zero; a flag is 1 or 0); absent when it is anything else or
    /// does not fit 64 bits.
    func lenientInt64(_ key: Key) -> Int64? {
        if let n = try? decode(Int64.self, forKey: key) { return n }
        if let d = try? decode(Double.self, forKey: key) { return Int64(exactly: d.rounded(.towardZero)) }
        if let b = try? decode(Bool.self, forKey: key) { return b ? 1 : 0 }
        return nil
    }

    /// A flag member, or a number that is exactly 1 or 0; absent when it is anything else.
    func lenientBool(_ key: Key) -> Bool? {
        if let b = try? decode(Bool.self, forKey: key) { return b }
        switch try? decode(Double.self, forKey: key) {
        case 1: return true
        case 0: return false
        default: return nil
        }
    }

    /// The string entries of an array member (others skipped); empty when it is not an array.
    func lenientStrings(_ key: Key) -> [String] {
        guard var list = try? nestedUnkeyedContainer(forKey: key) else { return [] }
        var strings: [String] = []
        while !list.isAtEnd {
            if let s = try? list.decode(String.self) {
                strings.append(s)
            } else if (try? list.decode(SkippedJSONValue.self)) == nil {
                break  // cannot step over it: stop rather than loop
            }
        }
        return strings
    }
}

/// Any JSON value, read only to step over it.
private struct SkippedJSONValue: Decodable {
    init(from decoder: any Decoder) throws {}
}
