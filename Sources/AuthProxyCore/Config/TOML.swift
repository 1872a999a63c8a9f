/// A TOML document model that remembers the line of every key, so configuration errors can say where.
///
/// This is a small, complete-enough TOML 1.0 reader for configuration files: tables, arrays of tables,
/// dotted keys, basic/literal/multi-line strings, integers (decimal, hex, octal, binary), floats,
/// booleans, date-times (kept as their text), arrays and inline tables.
public indirect enum TOMLValue {
    case string(String)
    case integer(Int64)
    case float(Double)
    case bool(Bool)
    case datetime(String)
    case array([TOMLNode])
    case table(TOMLTable)

    var typeName: String {
        switch self {
        case .string: return "string"
        case .integer: return "integer"
        case .float: return "float"
        case .bool: return "boolean"
        case .datetime: return "date-time"
        case .array: return "array"
        case .table: return "table"
        }
    }
}

/// A value and the line it was written on.
public struct TOMLNode {
    public var value: TOMLValue
    public var line: Int
}

/// A table: keys in file order.
public final class TOMLTable {
    public private(set) var entries: [(key: String, node: TOMLNode)] = []
    public let line: Int
    /// Set once a `[header]` names this table, to refuse a second definition.
    var definedByHeader = false
    /// Inline tables are closed once written.
    var sealed = false

    init(line: Int) { self.line = line }

    public subscript(key: String) -> TOMLNode? {
        entries.first { $0.key == key }?.node
    }

    func set(_ key: String, _ node: TOMLNode) throws(TOMLError) {
        if self[key] != nil { throw TOMLError(line: node.line, message: "key '\(key)' is defined twice") }
        entries.append((key, node))
    }

    /// Appends `node` to the array at `key` in place: the array is taken out of its entry first, so it is not
    /// shared and grows without a copy (one copy per `[[table]]` made reading N of them quadratic).
    func append(_ key: String, _ node: TOMLNode) {
        guard let i = entries.firstIndex(where: { $0.key == key }), case .array(var items) = entries[i].node.value
        else { return }
        entries[i].node.value = .bool(false)
        items.append(node)
        entries[i].node.value = .array(items)
    }
}

public struct TOMLError: Error, CustomStringConvertible, Sendable {
    public let line: Int
    public let message: String
    public var description: String { "line \(line): \(message)" }
}

/// Parses TOML text into a root table.
public struct TOMLParser {
    private let s: [UInt8]
    private var i = 0
    private var line = 1
    /// Arrays and inline tables open around the value being read. Values are read recursively, so without a bound
    /// `a = [[[[…` overflows the stack (a fuzzing finding) instead of being an error. Dotted keys nest tables too,
    /// without recursion while parsing, but a chain of thousands of tables overflows the stack when it is released
    /// (`a.a.a.…= 1`): a key path has at most as many parts. Nesting stays in the low thousands at most.
    private var depth = 0
    static let maxDepth = 64
    /// The key whose value is being read, for errors: they name the key and where, never the text that failed
    /// to parse (an unquoted API key is a syntax error, and errors reach logs and the admin listener).
    private var valueKey = ""

    public static func parse(_ text: String) throws(TOMLError) -> TOMLTable {
        var p = TOMLParser(s: Array(text.utf8))
        return try p.document()
    }

    private init(s: [UInt8]) { self.s = s }

    private var atEnd: Bool { i >= s.count }
    private var peek: UInt8 { i < s.count ? s[i] : 0 }
    private func peek(_ k: Int) -> UInt8 { i + k < s.count ? s[i + k] : 0 }
    private func fail(_ m: String) -> TOMLError { TOMLError(line: line, message: m) }

    /// The 1-based (byte) column of position `j` on its line.
    private func column(at j: Int) -> Int {
        var k = min(j, s.count)
        while k > 0, s[k - 1] != 10 { k -= 1 }
        return min(j, s.count) - k + 1
    }

    /// The error for a value that could not be read at `start`: key, column and a hint, not the text.
    private func invalidValue(at start: Int) -> TOMLError {
        let key = valueKey.isEmpty ? "" : " for key '\(valueKey)'"
        return fail("column \(column(at: start)): invalid value\(key) (a string needs quotes: key = \"...\")")
    }

    private mutating func skipSpaces() {
        while !atEnd, peek == 32 || peek == 9 { i += 1 }
    }

    private mutating func skipComment() throws(TOMLError) {
        if peek == 35 {
            while !atEnd, peek != 10 {
                if peek < 0x20 && peek != 9 && !(peek == 13 && peek(1) == 10) {
                    throw fail("control character in comment")
                }
                i += 1
            }
        }
    }

    /// Skips spaces, comments and newlines.
    private mutating func skipBlank() throws(TOMLError) {
        while !atEnd {
            skipSpaces()
            try skipComment()
            if peek == 13 && peek(1) == 10 {
                i += 2; line += 1
            } else if peek == 10 {
                i += 1; line += 1
            } else {
                return
            }
        }
    }

    private mutating func endOfLine() throws(TOMLError) {
        skipSpaces()
        try skipComment()
        if atEnd { return }
        if peek == 13 && peek(1) == 10 { i += 2; line += 1; return }
        if peek == 10 { i += 1; line += 1; return }
        throw fail("unexpected text after value")
    }

    private mutating func document() throws(TOMLError) -> TOMLTable {
        let root = TOMLTable(line: 1)
        var current = root
        while true {
            try skipBlank()
            if atEnd { break }
            if peek == 91 /* [ */ {
                let headerLine = line
                let isArray = peek(1) == 91
                i += isArray ? 2 : 1
                skipSpaces()
                let path = try keyPath()
                skipSpaces()
                guard peek == 93 else { throw fail("expected ']' after table name") }
                i += 1
                if isArray {
                    guard peek == 93 else { throw fail("expected ']]' after array-of-tables name") }
                    i += 1
                }
                try endOfLine()
                current = try openTable(root, path, isArray: isArray, line: headerLine)
            } else {
                try keyValue(into: current)
                try endOfLine()
            }
        }
        return root
    }

    private func openTable(_ root: TOMLTable, _ path: [String], isArray: Bool, line: Int) throws(TOMLError) -> TOMLTable
    {
        var t = root
        for key in path.dropLast() { t = try descend(t, key, line: line) }
        let last = path.last!
        if isArray {
            let fresh = TOMLTable(line: line)
            if t[last] != nil {
                // Checked in a scope of its own: a reference to the array held across the append would make it
                // copy the whole array.
                guard Self.takesTables(t, last) else {
                    throw TOMLError(line: line, message: "'\(last)' is not an array of tables")
                }
                t.append(last, TOMLNode(value: .table(fresh), line: line))
            } else {
                try t.set(last, TOMLNode(value: .array([TOMLNode(value: .table(fresh), line: line)]), line: line))
            }
            return fresh
        }
        if let existing = t[last] {
            guard case .table(let tt) = existing.value, !tt.definedByHeader, !tt.sealed else {
                throw TOMLError(line: line, message: "table '\(path.joined(separator: "."))' is defined twice")
            }
            tt.definedByHeader = true
            return tt
        }
        let fresh = TOMLTable(line: line)
        fresh.definedByHeader = true
        try t.set(last, TOMLNode(value: .table(fresh), line: line))
        return fresh
    }

    /// Whether an array may take another `[[table]]`: all its items are tables. An array the headers made ends
    /// with a header's table (never sealed), and every item before it was checked when it came: so only an array
    /// written inline is looked at whole (a file of 10,000 `[[credential]]` entries would be quadratic otherwise).
    private static func takesTables(_ t: TOMLTable, _ key: String) -> Bool {
        guard case .array(let items)? = t[key]?.value else { return false }
        if case .table(let last)? = items.last?.value, !last.sealed { return true }
        return items.allSatisfy { if case .table = $0.value { true } else { false } }
    }

    /// The sub-table `key` of `t`, created if absent; the last element for an array of tables.
    private func descend(_ t: TOMLTable, _ key: String, line: Int) throws(TOMLError) -> TOMLTable {
        if let n = t[key] {
            switch n.value {
            case .table(let tt):
                if tt.sealed { throw TOMLError(line: line, message: "inline table '\(key)' cannot be extended") }
                return tt
            case .array(let items):
                if case .table(let tt)? = items.last?.value { return tt }
                throw TOMLError(line: line, message: "'\(key)' is not a table")
            default:
                throw TOMLError(line: line, message: "'\(key)' is not a table")
            }
        }
        let fresh = TOMLTable(line: line)
        try t.set(key, TOMLNode(value: .table(fresh), line: line))
        return fresh
    }

    private mutating func keyValue(into table: TOMLTable) throws(TOMLError) {
        let keyLine = line
        let path = try keyPath()
        skipSpaces()
        // Not quoting the key: a line holding only a pasted secret reads as a bare key.
        guard peek == 61 /* = */ else { throw fail("column \(column(at: i)): expected '=' after a key") }
        i += 1
        skipSpaces()
        let outer = valueKey
        valueKey = path.joined(separator: ".")
        defer { valueKey = outer }
        let v = try value()
        var t = table
        for key in path.dropLast() { t = try descend(t, key, line: keyLine) }
        try t.set(path.last!, TOMLNode(value: v, line: keyLine))
    }

    private mutating func keyPath() throws(TOMLError) -> [String] {
        var parts: [String] = []
        while true {
            skipSpaces()
            if peek == 34 {
                parts.append(try basicString())
            } else if peek == 39 {
                parts.append(try literalString())
            } else {
                let start = i
                while !atEnd, isBareKeyChar(peek) { i += 1 }
                guard i > start else { throw fail("expected a key") }
                parts.append(String(decoding: s[start..<i], as: UTF8.self))
            }
            skipSpaces()
            guard peek == 46 /* . */ else { return parts }
            guard parts.count < Self.maxDepth else { throw fail("key with more than \(Self.maxDepth) dotted parts") }
            i += 1
        }
    }

    private mutating func value() throws(TOMLError) -> TOMLValue {
        switch peek {
        case 34:
            if peek(1) == 34 && peek(2) == 34 { return .string(try multilineBasic()) }
            return .string(try basicString())
        case 39:
            if peek(1) == 39 && peek(2) == 39 { return .string(try multilineLiteral()) }
            return .string(try literalString())
        case 91: return try array()
        case 123: return try inlineTable()
        case 116, 102:
            if matches("true") { i += 4; return .bool(true) }
            if matches("false") { i += 5; return .bool(false) }
            throw invalidValue(at: i)
        default: return try numberOrDate()
        }
    }

    private func matches(_ word: String) -> Bool {
        let w = Array(word.utf8)
        guard i + w.count <= s.count, Array(s[i..<(i + w.count)]) == w else { return false }
        let after = i + w.count < s.count ? s[i + w.count] : 32
        return !isBareKeyChar(after)
    }

    private mutating func array() throws(TOMLError) -> TOMLValue {
        try enter()
        defer { depth -= 1 }
        i += 1
        let opened = line
        var items: [TOMLNode] = []
        while true {
            try skipBlank()
            if peek == 93 { i += 1; return .array(items) }
            if atEnd { throw TOMLError(line: opened, message: "array opened here is not closed with ']'") }
            let l = line
            items.append(TOMLNode(value: try value(), line: l))
            try skipBlank()
            if atEnd { throw TOMLError(line: opened, message: "array opened here is not closed with ']'") }
            if peek == 44 { i += 1; continue }
            if peek == 93 { i += 1; return .array(items) }
            throw fail("expected ',' or ']' in array")
        }
    }

    private mutating func inlineTable() throws(TOMLError) -> TOMLValue {
        try enter()
        defer { depth -= 1 }
        i += 1
        let t = TOMLTable(line: line)
        skipSpaces()
        if peek == 125 { i += 1; t.sealed = true; return .table(t) }
        while true {
            skipSpaces()
            try keyValue(into: t)
            skipSpaces()
            if peek == 44 { i += 1; continue }
            if peek == 125 { i += 1; t.sealed = true; return .table(t) }
            throw fail("expected ',' or '}' in inline table")
        }
    }

    private mutating func enter() throws(TOMLError) {
        guard depth < Self.maxDepth else {
            throw fail("arrays and inline tables nested more than \(Self.maxDepth) deep")
        }
        depth += 1
    }

    private mutating func basicString() throws(TOMLError) -> String {
        i += 1
        var out: [UInt8] = []
        while true {
            guard !atEnd, peek != 10 else { throw fail("unterminated string") }
            let c = peek
            if c == 34 { i += 1; break }
            if c == 92 { try escape(into: &out); continue }
            if c < 0x20 && c != 9 || c == 0x7f { throw fail("control character in string") }
            out.append(c)
            i += 1
        }
        return String(decoding: out, as: UTF8.self)
    }

    private mutating func multilineBasic() throws(TOMLError) -> String {
        i += 3
        if peek == 13 && peek(1) == 10 { i += 2; line += 1 } else if peek == 10 { i += 1; line += 1 }
        var out: [UInt8] = []
        while true {
            guard !atEnd else { throw fail("unterminated multi-line string") }
            let c = peek
            if c == 34 && peek(1) == 34 && peek(2) == 34 {
                // Up to two quotes may directly precede the closing delimiter and belong to the content.
                var extra = 0
                while extra < 2, peek(3 + extra) == 34 { extra += 1 }
                out.append(contentsOf: repeatElement(34, count: extra))
                i += 3 + extra
                break
            }
            if c == 92 {
                // Line-ending backslash trims the newline and following whitespace.
                var j = i + 1
                while j < s.count, s[j] == 32 || s[j] == 9 { j += 1 }
                if j < s.count, s[j] == 10 || (s[j] == 13 && j + 1 < s.count && s[j + 1] == 10) {
                    i = j
                    while !atEnd, peek == 32 || peek == 9 || peek == 10 || peek == 13 {
                        if peek == 10 { line += 1 }
                        i += 1
                    }
                    continue
                }
                try escape(into: &out)
                continue
            }
            if c == 10 { line += 1 }
            out.append(c)
            i += 1
        }
        return String(decoding: out, as: UTF8.self)
    }

    private mutating func literalString() throws(TOMLError) -> String {
        i += 1
        let start = i
        while !atEnd, peek != 39 {
            if peek == 10 { throw fail("unterminated string") }
            i += 1
        }
        guard !atEnd else { throw fail("unterminated string") }
        let str = String(decoding: s[start..<i], as: UTF8.self)
        i += 1
        return str
    }

    private mutating func multilineLiteral() throws(TOMLError) -> String {
        i += 3
        if peek == 13 && peek(1) == 10 { i += 2; line += 1 } else if peek == 10 { i += 1; line += 1 }
        let start = i
        while !atEnd {
            if peek == 39 && peek(1) == 39 && peek(2) == 39 {
                let str = String(decoding: s[start..<i], as: UTF8.self)
                i += 3
                return str
            }
            if peek == 10 { line += 1 }
            i += 1
        }
        throw fail("unterminated multi-line string")
    }

    private mutating func escape(into out: inout [UInt8]) throws(TOMLError) {
        i += 1
        let c = peek
        i += 1
        switch c {
        case 98: out.append(8)
        case 116: out.append(9)
        case 110: out.append(10)
        case 102: out.append(12)
        case 114: out.append(13)
        case 34: out.append(34)
        case 92: out.append(92)
        case 117, 85:
            let n = c == 117 ? 4 : 8
            guard i + n <= s.count, let v = UInt32(String(decoding: s[i..<(i + n)], as: UTF8.self), radix: 16),
                let scalar = Unicode.Scalar(v)
            else { throw fail("invalid unicode escape") }
            out.append(contentsOf: Array(String(Character(scalar)).utf8))
            i += n
        default: throw fail("invalid escape sequence")
        }
    }

    private mutating func numberOrDate() throws(TOMLError) -> TOMLValue {
        let start = i
        while !atEnd, isBareKeyChar(peek) || peek == 43 || peek == 46 || peek == 58 { i += 1 }
        // A date and a time may be separated by one space.
        if i - start == 10, peek == 32, peek(1) >= 48, peek(1) <= 57 {
            i += 1
            while !atEnd, isBareKeyChar(peek) || peek == 43 || peek == 46 || peek == 58 { i += 1 }
        }
        let text = String(decoding: s[start..<i], as: UTF8.self)
        guard !text.isEmpty else {
            let key = valueKey.isEmpty ? "" : " for key '\(valueKey)'"
            throw fail("column \(column(at: start)): expected a value\(key)")
        }
        let u = Array(text.utf8)
        if u.count >= 10, u[4] == 45, u[7] == 45, u[0...3].allSatisfy({ $0 >= 48 && $0 <= 57 }) {
            return .datetime(text)
        }
        if u.count >= 8, u[2] == 58, u[5] == 58 { return .datetime(text) }
        let clean = text.replacingUnderscores()
        if clean.hasPrefix("0x"), let v = Int64(clean.dropFirst(2), radix: 16) { return .integer(v) }
        if clean.hasPrefix("0o"), let v = Int64(clean.dropFirst(2), radix: 8) { return .integer(v) }
        if clean.hasPrefix("0b"), let v = Int64(clean.dropFirst(2), radix: 2) { return .integer(v) }
        if let v = Int64(clean),
            !(clean.count > 1 && (clean.hasPrefix("0") || clean.hasPrefix("+0") || clean.hasPrefix("-0")))
        {
            return .integer(v)
        }
        switch clean {
        case "inf", "+inf": return .float(.infinity)
        case "-inf": return .float(-.infinity)
        case "nan", "+nan", "-nan": return .float(.nan)
        default: break
        }
        if let d = Double(clean), clean.contains(where: { $0 == "." || $0 == "e" || $0 == "E" }) { return .float(d) }
        throw invalidValue(at: start)
    }
}

private func isBareKeyChar(_ c: UInt8) -> Bool {
    (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c == 95 || c == 45
}

extension String {
    fileprivate func replacingUnderscores() -> String { String(self.filter { $0 != "_" }) }
}
