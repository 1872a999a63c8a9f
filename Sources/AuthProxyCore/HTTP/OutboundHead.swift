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
    /// `fields` cannot be written, or nil when it can. Runs for every request, so the common answer (nothing wrong)
    /// is one pass of table lookups over each string's contiguous bytes; the reason is worked out only on failure.
    static func problem(method: String, target: String, fields: HTTPHeaders) -> Problem? {
        let t = ByteTables.shared
        if method.isEmpty || !all(method, t.token) {
            return Problem(field: nil, what: "has a method that is not an HTTP token")
        }
        if target.isEmpty || !all(target, t.target) {
            return Problem(field: nil, what: "has a target with a byte that is not visible ASCII (or a '#')")
        }
        for f in fields.fields where !fieldIsSound(name: f.name, value: f.value, t) {
            // A name that is not a token is not shown either: it may be what carries the smuggled bytes.
            let shown = !f.name.isEmpty && all(f.name, t.token) ? f.name : "(an invalid name)"
            return Problem(field: shown, what: fieldProblem(name: f.name, value: f.value) ?? "is invalid")
        }
        return nil
    }

    /// Why one field cannot be written, or nil.
    static func fieldProblem(name: String, value: String) -> String? {
        let t = ByteTables.shared
        if name.isEmpty || !all(name, t.token) { return "has a name that is not an HTTP token" }
        let v = Array(value.utf8)
        if let first = v.first, first == 32 || first == 9 { return "has a value that starts with whitespace" }
        if let last = v.last, last == 32 || last == 9 { return "has a value that ends with whitespace" }
        if let i = v.firstIndex(where: { t.value[Int($0)] == 0 }) {
            return "has a value with a control byte (\(TokenSyntax.describe(v[i])) at byte \(i))"
        }
        return nil
    }

    /// Whether a field passes (``fieldProblem(name:value:)`` is nil), without working out why not.
    @inline(__always)
    private static func fieldIsSound(name: String, value: String, _ t: ByteTables) -> Bool {
        guard !name.isEmpty, all(name, t.token) else { return false }
        let edges = value.utf8.withContiguousStorageIfAvailable { buf -> Bool in
            buf.isEmpty || (buf[0] != 32 && buf[0] != 9 && buf[buf.count - 1] != 32 && buf[buf.count - 1] != 9)
        }
        let sound =
            edges
            ?? (value.utf8.first.map { $0 != 32 && $0 != 9 } ?? true
                && value.utf8.last.map { $0 != 32 && $0 != 9 } ?? true)
        return sound && all(value, t.value)
    }

    /// Whether every byte of `s` is allowed by `table` (256 entries, 1: allowed).
    @inline(__always)
    private static func all(_ s: String, _ table: UnsafePointer<UInt8>) -> Bool {
        if let r = s.utf8.withContiguousStorageIfAvailable({ buf -> Bool in
            var ok: UInt8 = 1
            for b in buf { ok &= table[Int(b)] }
            return ok == 1
        }) {
            return r
        }
        return s.utf8.allSatisfy { table[Int($0)] == 1 }
    }

    /// Which bytes may stand where (1: allowed), made once for the process: the method and field names (tokens),
    /// the target (visible ASCII but `#`), and field values (HTAB, SP, visible ASCII, `obs-text`).
    private final class ByteTables: @unchecked Sendable {
        static let shared = ByteTables()
        let token: UnsafeMutablePointer<UInt8>
        let target: UnsafeMutablePointer<UInt8>
        let value: UnsafeMutablePointer<UInt8>

        private init() {
            token = .allocate(capacity: 256)
            target = .allocate(capacity: 256)
            value = .allocate(capacity: 256)
            for i in 0..<256 {
                let b = UInt8(i)
                token[i] = isTokenChar(b) ? 1 : 0
                target[i] = b > 0x20 && b < 0x7F && b != UInt8(ascii: "#") ? 1 : 0
                value[i] = b == 9 || (b >= 0x20 && b != 0x7F) ? 1 : 0
            }
        }
    }
}
