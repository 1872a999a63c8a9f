/// The fields of an `application/x-www-form-urlencoded` text (a form body or a query string), read and rewritten
/// without touching the fields it does not change.
enum FormFields {
    /// The decoded value of field `name` (ASCII case-insensitive), when it occurs exactly once; nil when it is absent;
    /// `.ambiguous` when it occurs more than once (a server could read either).
    enum Lookup: Equatable {
        case absent
        case ambiguous
        case value([UInt8])
    }

    static func lookup(_ name: String, in fields: [UInt8]) -> Lookup {
        var found: [UInt8]? = nil
        var count = 0
        for field in fields.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let eq = field.firstIndex(of: UInt8(ascii: "=")) ?? field.endIndex
            guard nameIs(field[..<eq], name) else { continue }
            count += 1
            found = eq == field.endIndex ? [] : TokenInjection.percentDecoded(field[field.index(after: eq)...])
        }
        if count > 1 { return .ambiguous }
        return found.map { .value($0) } ?? .absent
    }

    /// `fields` with the value of field `name` (which occurs once) replaced by `value`, percent-encoded; the other
    /// fields as they were.
    static func replacing(_ name: String, with value: [UInt8], in fields: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(fields.count + value.count / 2)
        var first = true
        for field in fields.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: false) {
            if !first { out.append(UInt8(ascii: "&")) }
            first = false
            let eq = field.firstIndex(of: UInt8(ascii: "=")) ?? field.endIndex
            if nameIs(field[..<eq], name) {
                out += field[..<eq]
                out.append(UInt8(ascii: "="))
                out += percentEncoded(value)
            } else {
                out += field
            }
        }
        return out
    }

    private static func nameIs(_ raw: ArraySlice<UInt8>, _ name: String) -> Bool {
        let decoded = TokenInjection.percentDecoded(raw)
        return decoded.count == name.utf8.count
            && zip(decoded, name.utf8).allSatisfy { lower($0) == lower($1) }
    }

    private static func lower(_ b: UInt8) -> UInt8 {
        b >= UInt8(ascii: "A") && b <= UInt8(ascii: "Z") ? b + 32 : b
    }

    /// Everything but RFC 3986 unreserved bytes as `%XX` (what `encodeURIComponent` leaves is left too).
    static func percentEncoded(_ bytes: [UInt8]) -> [UInt8] {
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for b in bytes {
            if isUnreservedURIByte(b) {
                out.append(b)
            } else {
                out += [UInt8(ascii: "%"), hex[Int(b >> 4)], hex[Int(b & 15)]]
            }
        }
        return out
    }
}
