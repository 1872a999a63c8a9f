/// Whether a token a token service handed out may be put into a request at all. Pure.
///
/// A token answer is JSON: its string can hold any byte, CR and LF included. Written into `Authorization: Bearer …`
/// or `X-Esri-Authorization` as it is, `"tok\r\nX-Injected: 1\r\n\r\nGET /smuggled HTTP/1.1…"` would end the
/// head early and make the upstream read a second request on the proxy's pooled connection, whose answer the next
/// client would receive. So a token is checked when it arrives, by the syntax its kind has, and one that breaks it is
/// no token: the request gets a 502 naming the token service, and the credential backs off as after an answer
/// without a token. (``OutboundHead`` checks every head again on the way out, whatever put a byte into it.)
///
/// - An ArcGIS token (`generateToken`, the portal's `oauth2/token`): visible ASCII, `%x21-7E` (RFC 5234 `VCHAR`).
///   ArcGIS tokens are base64url-like (letters, digits, `-`, `_`, `.`); nothing ArcGIS issues has a space or a
///   control byte.
/// - An OAuth 2.0 access token (`oauth2`): RFC 6750 §2.1 `b64token`, `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" /
///   "+" / "/" ) *"="`, the only form `Authorization: Bearer` may carry (JWTs and opaque provider tokens fit it).
enum TokenSyntax {
    /// Why `token` cannot be an ArcGIS token, or nil when it can. Never quotes the token: it names the first byte
    /// that is wrong and where it is.
    static func arcgisProblem(_ token: String) -> String? {
        guard !token.isEmpty else { return "it is empty" }
        for (i, b) in token.utf8.enumerated() where !(0x21...0x7E).contains(b) {
            return "it is not visible ASCII (\(describe(b)) at byte \(i) of \(token.utf8.count))"
        }
        return nil
    }

    /// Why `token` cannot be an RFC 6750 bearer token, or nil when it can (see the type's comment).
    static func bearerProblem(_ token: String) -> String? {
        guard !token.isEmpty else { return "it is empty" }
        var padding = false
        for (i, b) in token.utf8.enumerated() {
            if b == UInt8(ascii: "=") {
                guard i > 0 else { return "it is not an RFC 6750 b64token (it starts with '=')" }
                padding = true
                continue
            }
            guard !padding else {
                return "it is not an RFC 6750 b64token ('=' is only allowed at the end; byte \(i) follows one)"
            }
            guard isB64TokenChar(b) else {
                return "it is not an RFC 6750 b64token (\(describe(b)) at byte \(i) of \(token.utf8.count))"
            }
        }
        return nil
    }

    private static func isB64TokenChar(_ b: UInt8) -> Bool {
        switch b {
        case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: return true
        case UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: "+"),
            UInt8(ascii: "/"):
            return true
        default: return false
        }
    }

    /// A byte as a message shows it: printable ASCII quoted, anything else in hex (`0x0D`).
    static func describe(_ b: UInt8) -> String {
        if (0x21...0x7E).contains(b) { return "'\(Character(Unicode.Scalar(b)))'" }
        let hex = String(b, radix: 16, uppercase: true)
        return "byte 0x" + (hex.count < 2 ? "0" + hex : hex)
    }
}
