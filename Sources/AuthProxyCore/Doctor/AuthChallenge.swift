/// One challenge of a `WWW-Authenticate` field (RFC 9110 §11.6.1): a scheme with either a token68 (NTLM's
/// and Negotiate's handshake tokens) or a list of auth-params (`realm`, `nonce`, `qop`, …).
///
/// A server may send several `WWW-Authenticate` fields (IIS sends `Negotiate` and `NTLM` as two), and one
/// field may hold several comma-separated challenges whose parameters are comma-separated too:
/// `Basic realm="a", Digest realm="b", nonce="c", qop="auth"`. ``parse(_:)`` tells a comma that starts a new
/// challenge from one that separates parameters the way the grammar does: what follows is a parameter only
/// when it reads `token BWS "=" BWS (token / quoted-string)` up to the next comma or the end.
public struct AuthChallenge: Sendable, Equatable {
    /// As the server wrote it (`Basic`, `NTLM`); compare with ``is(_:)``, schemes are case-insensitive.
    public var scheme: String
    /// The token68 form (`Negotiate <base64>`), if the challenge has one.
    public var token68: String?
    /// Auth-params in order; names lower-cased (they are case-insensitive), quoted values unescaped.
    public var parameters: [(name: String, value: String)]

    public init(scheme: String, token68: String? = nil, parameters: [(name: String, value: String)] = []) {
        self.scheme = scheme
        self.token68 = token68
        self.parameters = parameters
    }

    public static func == (a: AuthChallenge, b: AuthChallenge) -> Bool {
        a.scheme == b.scheme && a.token68 == b.token68 && a.parameters.elementsEqual(b.parameters) { $0 == $1 }
    }

    public func `is`(_ scheme: String) -> Bool { self.scheme.lowercased() == scheme.lowercased() }

    /// The first parameter called `name` (case-insensitive).
    public func parameter(_ name: String) -> String? {
        let n = name.lowercased()
        return parameters.first { $0.name == n }?.value
    }

    public var realm: String? { parameter("realm") }

    /// Every challenge in the values of all `WWW-Authenticate` fields of one response, in order.
    public static func parse(fields: [String]) -> [AuthChallenge] {
        fields.flatMap { parse($0) }
    }

    /// The challenges in one field value. Malformed parts are skipped up to the next comma, so one odd
    /// challenge does not hide the others.
    public static func parse(_ value: String) -> [AuthChallenge] {
        var s = Scanner(Array(value.utf8))
        var out: [AuthChallenge] = []
        while true {
            s.skipListSeparators()
            if s.atEnd { break }
            guard let scheme = s.token() else {
                s.skipPast(UInt8(ascii: ","))
                continue
            }
            if s.atStrayParameter() {
                // `name=value` where a scheme belongs (a parameter after a token68): not a challenge.
                s.skipPast(UInt8(ascii: ","))
                continue
            }
            var challenge = AuthChallenge(scheme: scheme)
            // A scheme, then at least one space before its token68 or parameters.
            if s.skipSpaces() > 0, !s.atEnd, s.peek != UInt8(ascii: ",") {
                if let p = s.parameter() {
                    challenge.parameters.append(p)
                    // More parameters of the same challenge follow a comma, as long as they read as parameters.
                    while true {
                        let mark = s.position
                        s.skipListSeparators()
                        guard !s.atEnd, let next = s.parameter() else {
                            s.position = mark
                            break
                        }
                        challenge.parameters.append(next)
                    }
                } else if let t = s.token68() {
                    challenge.token68 = t
                } else {
                    out.append(challenge)
                    s.skipPast(UInt8(ascii: ","))
                    continue
                }
            }
            out.append(challenge)
            s.skipSpaces()
            if !s.atEnd, s.peek != UInt8(ascii: ",") { s.skipPast(UInt8(ascii: ",")) }
        }
        return out
    }

    /// A cursor over the bytes of a field value.
    private struct Scanner {
        let b: [UInt8]
        var position = 0

        init(_ b: [UInt8]) { self.b = b }

        var atEnd: Bool { position >= b.count }
        var peek: UInt8 { b[position] }

        @discardableResult
        mutating func skipSpaces() -> Int {
            let start = position
            while !atEnd, peek == 0x20 || peek == 0x09 { position += 1 }
            return position - start
        }

        /// Spaces and commas: list elements may be empty (`a, , b`).
        mutating func skipListSeparators() {
            while !atEnd, peek == 0x20 || peek == 0x09 || peek == UInt8(ascii: ",") { position += 1 }
        }

        mutating func skipPast(_ c: UInt8) {
            while !atEnd, peek != c { position += 1 }
            if !atEnd { position += 1 }
        }

        /// Whether the cursor is at the end or (after spaces) at a comma: where a list element ends.
        func atElementEnd() -> Bool {
            var i = position
            while i < b.count, b[i] == 0x20 || b[i] == 0x09 { i += 1 }
            return i >= b.count || b[i] == UInt8(ascii: ",")
        }

        /// Whether `BWS "="` follows: the token just read was a parameter name, not a scheme.
        func atStrayParameter() -> Bool {
            var i = position
            while i < b.count, b[i] == 0x20 || b[i] == 0x09 { i += 1 }
            return i < b.count && b[i] == UInt8(ascii: "=")
        }

        mutating func token() -> String? {
            let start = position
            while !atEnd, Self.isTChar(peek) { position += 1 }
            return position > start ? String(decoding: b[start..<position], as: UTF8.self) : nil
        }

        /// `token BWS "=" BWS (token / quoted-string)`, ending where a list element ends; the cursor stays put
        /// when the text is not one.
        mutating func parameter() -> (name: String, value: String)? {
            let mark = position
            guard let name = token() else { return nil }
            skipSpaces()
            guard !atEnd, peek == UInt8(ascii: "=") else {
                position = mark
                return nil
            }
            position += 1
            skipSpaces()
            let value: String?
            if !atEnd, peek == UInt8(ascii: "\"") {
                value = quotedString()
            } else {
                value = token()
            }
            guard let value, atElementEnd() else {
                position = mark
                return nil
            }
            skipSpaces()
            return (name.lowercased(), value)
        }

        /// `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`, ending where a list element ends.
        mutating func token68() -> String? {
            let mark = position
            while !atEnd, Self.isToken68Char(peek) { position += 1 }
            guard position > mark else { return nil }
            while !atEnd, peek == UInt8(ascii: "=") { position += 1 }
            guard atElementEnd() else {
                position = mark
                return nil
            }
            return String(decoding: b[mark..<position], as: UTF8.self)
        }

        /// A quoted-string with its backslash escapes resolved; nil when it is not closed.
        mutating func quotedString() -> String? {
            let mark = position
            position += 1
            var bytes: [UInt8] = []
            while !atEnd {
                let c = peek
                position += 1
                if c == UInt8(ascii: "\"") { return String(decoding: bytes, as: UTF8.self) }
                if c == UInt8(ascii: "\\") {
                    guard !atEnd else { break }
                    bytes.append(peek)
                    position += 1
                } else {
                    bytes.append(c)
                }
            }
            position = mark
            return nil
        }

        static func isTChar(_ c: UInt8) -> Bool {
            switch c {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"):
                return true
            default:
                return "!#$%&'*+-.^_`|~".utf8.contains(c)
            }
        }

        static func isToken68Char(_ c: UInt8) -> Bool {
            switch c {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"):
                return true
            default:
                return "-._~+/".utf8.contains(c)
            }
        }
    }
}

extension AuthChallenge: CustomStringConvertible {
    /// The scheme and its realm, for the summary; never the token68 (an NTLM challenge is noise to a reader).
    public var description: String {
        var s = scheme
        if let r = realm { s += " realm=\"\(r)\"" }
        if self.is("Digest") {
            if let a = parameter("algorithm") { s += " algorithm=\(a)" }
            if let q = parameter("qop") { s += " qop=\"\(q)\"" }
        }
        return s
    }
}
