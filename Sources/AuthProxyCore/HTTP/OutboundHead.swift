/// The one check every request head passes before the proxy writes it upstream, over either client: no byte that
/// ``RequestHeadParser`` would refuse in a head it reads. Pure.
///
/// A client's own fields were parsed by that parser and pass by construction; what can break the rule is what the
/// proxy puts in — a token from a token service (``TokenSyntax`` checks it as it arrives), an API key, a `header`
/// credential's values, a gateway's token, a bound `Referer`. A CR or LF there ends the head early and the rest is
/// read as a second request on a pooled connection (its answer then goes to the next client); NUL, DEL and other
/// control bytes are read differently by different servers. So a head that fails the check is never written: the
/// request gets a 502 naming the field (never its value).
///
/// The rules are the parser's: the method a token (RFC 9110 §5.6.2); the target visible ASCII without `#`; field
/// names tokens; field values HTAB, SP, visible ASCII or `obs-text` (8-bit bytes, which the parser accepts and
/// passes on), with no leading or trailing whitespace (the parser would trim it, so the value read would differ from
/// the one written).
enum OutboundHead {
    struct Problem: Equatable, Sendable {
        /// The field at fault (nil: the request line).
        var field: String?
        /// What is wrong, without the value.
        var what: String

        var message: String {
            field.map { "the header field \($0) \(what)" } ?? "the request line \(what)"
        }
    }

    /// Why the head made of `method`, `target` (the request target as written: origin or absolute form) and
    /// `fields` cannot be written, or nil when it can.
    static func problem(method: String, target: String, fields: HTTPHeaders) -> Problem? {
        if method.isEmpty || !method.utf8.allSatisfy(isTokenChar) {
            return Problem(field: nil, what: "has a method that is not an HTTP token")
        }
        if target.isEmpty || !target.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "#") }) {
            return Problem(field: nil, what: "has a target with a byte that is not visible ASCII (or a '#')")
        }
        for f in fields.fields {
            if let why = fieldProblem(name: f.name, value: f.value) {
                // A name that is not a token is not shown either: it may be what carries the smuggled bytes.
                let shown = f.name.utf8.allSatisfy(isTokenChar) && !f.name.isEmpty ? f.name : "(an invalid name)"
                return Problem(field: shown, what: why)
            }
        }
        return nil
    }

    /// Why one field cannot be written, or nil.
    static func fieldProblem(name: String, value: String) -> String? {
        if name.isEmpty || !name.utf8.allSatisfy(isTokenChar) { return "has a name that is not an HTTP token" }
        let v = value.utf8
        if let first = v.first, first == 32 || first == 9 { return "has a value that starts with whitespace" }
        if let last = v.last, last == 32 || last == 9 { return "has a value that ends with whitespace" }
        for (i, b) in v.enumerated() where !(b == 9 || (b >= 0x20 && b != 0x7F)) {
            return "has a value with a control byte (\(TokenSyntax.describe(b)) at byte \(i))"
        }
        return nil
    }
}
