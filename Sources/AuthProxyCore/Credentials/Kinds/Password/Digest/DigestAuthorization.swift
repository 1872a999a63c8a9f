/// Computes the `Authorization: Digest …` value for one request (RFC 7616 §3.4, RFC 2617 §3.2.2). Never logged:
/// it holds no reusable secret, but its response and cnonce identify the login.
enum DigestAuthorization {
    /// A fresh client nonce: 16 bytes from OpenSSL's CSPRNG, as hex.
    static func newCnonce() -> String { Crypto.hex(Crypto.random(16)) }

    /// The field value. `uri` is the request-target as sent (path and query); `nc` counts the requests made with
    /// this nonce, from 1.
    static func value(
        challenge c: DigestChallenge, qop: DigestQop, username: String, password: String, method: String, uri: String,
        nc: UInt32, cnonce: String
    ) -> String {
        let h = c.algorithm.hash
        var ha1 = h("\(username):\(c.realm):\(password)")
        if c.algorithm.isSession { ha1 = h("\(ha1):\(c.nonce):\(cnonce)") }
        let ha2: String
        switch qop {
        case .authIntEmptyBody: ha2 = h("\(method):\(uri):\(h(""))")
        case .auth, .none: ha2 = h("\(method):\(uri)")
        }
        let ncText = ncString(nc)
        let qopText = qop == .auth ? "auth" : "auth-int"
        let response =
            qop == .none
            ? h("\(ha1):\(c.nonce):\(ha2)")
            : h("\(ha1):\(c.nonce):\(ncText):\(cnonce):\(qopText):\(ha2)")
        var out = "Digest "
        // Any byte outside printable ASCII goes percent-encoded (RFC 8187), with or without the server's charset:
        // a user name from the configuration (or a file or variable it names) can never put a CR, LF, NUL or other
        // control byte into the request head.
        if !username.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) {
            out += "username*=UTF-8''\(percentEncoded(username))"
        } else {
            out += "username=\(quoted(username))"
        }
        out +=
            ", realm=\(quoted(c.realm)), nonce=\(quoted(c.nonce)), uri=\(quoted(uri)), algorithm=\(c.algorithm.rawValue)"
        if qop != .none { out += ", qop=\(qopText), nc=\(ncText), cnonce=\(quoted(cnonce))" }
        out += ", response=\(quoted(response))"
        if let o = c.opaque { out += ", opaque=\(quoted(o))" }
        return out
    }

    /// `nc`: eight hex digits.
    static func ncString(_ nc: UInt32) -> String {
        let hex = String(nc, radix: 16)
        return String(repeating: "0", count: max(0, 8 - hex.count)) + hex
    }

    private static func quoted(_ s: String) -> String {
        var out = "\""
        for ch in s {
            if ch == "\"" || ch == "\\" { out.append("\\") }
            out.append(ch)
        }
        return out + "\""
    }

    /// RFC 8187 value characters: attr-char kept, every other byte as %XX.
    private static func percentEncoded(_ s: String) -> String {
        let keep = Set("!#$&+-.^_`|~".utf8)
        var out = ""
        for b in s.utf8 {
            if (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || keep.contains(b) {
                out.append(Character(Unicode.Scalar(b)))
            } else {
                let hex = String(b, radix: 16, uppercase: true)
                out += "%" + (hex.count == 1 ? "0" + hex : hex)
            }
        }
        return out
    }
}
