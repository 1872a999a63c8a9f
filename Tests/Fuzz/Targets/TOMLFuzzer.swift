@testable import AuthProxyCore

/// The TOML reader (`Config/TOML.swift`) and the configuration loader on arbitrary text.
///
/// Invariants:
/// - a document it accepts, written out again (every table inline, every string escaped), parses to the same values
///   (when it nests no deeper than inline values may);
/// - the loader turns any text into a configuration or a `ConfigError`, never a trap. Inputs naming `file:` are not
///   loaded: the loader would read that file.
enum TOMLFuzzer {
    static func run(_ input: UnsafeRawBufferPointer) {
        let text = String(decoding: input, as: UTF8.self)
        guard let root = try? TOMLParser.parse(text) else { return }
        // Every table is written inline, and inline nesting is bounded: a document nested deeper through dotted keys
        // or table headers cannot be written this way (it parsed, which is what matters).
        if depth(.table(root), limit: TOMLParser.maxDepth) > TOMLParser.maxDepth { return }
        let written = emit(root)
        let again: TOMLTable
        do {
            again = try TOMLParser.parse(written)
        } catch {
            return invariant(false, "written document does not parse (\(error)): \(written) from \(describe(input))")
        }
        invariant(same(.table(root), .table(again)), "written document differs: \(written) from \(describe(input))")

        if !text.contains("file:") { _ = try? ConfigLoader(environment: [:]).parse(text) }
    }

    /// How deeply arrays and tables nest in `v`, counted up to `limit + 1` at most.
    static func depth(_ v: TOMLValue, limit: Int) -> Int {
        guard limit >= 0 else { return 1 }
        switch v {
        case .array(let items): return 1 + (items.map { depth($0.value, limit: limit - 1) }.max() ?? 0)
        case .table(let t): return 1 + (t.entries.map { depth($0.node.value, limit: limit - 1) }.max() ?? 0)
        default: return 0
        }
    }

    /// The root table as `key = value` lines.
    static func emit(_ root: TOMLTable) -> String {
        root.entries.map { "\(quoted($0.key)) = \(emit($0.node.value))\n" }.joined()
    }

    static func emit(_ v: TOMLValue) -> String {
        switch v {
        case .string(let s): return quoted(s)
        case .integer(let n): return "\(n)"
        case .float(let d):
            if d.isNaN { return "nan" }
            if d.isInfinite { return d < 0 ? "-inf" : "inf" }
            return "\(d)"
        case .bool(let b): return b ? "true" : "false"
        case .datetime(let t): return t
        case .array(let items): return "[" + items.map { emit($0.value) }.joined(separator: ", ") + "]"
        case .table(let t):
            return "{" + t.entries.map { "\(quoted($0.key)) = \(emit($0.node.value))" }.joined(separator: ", ") + "}"
        }
    }

    /// A TOML basic string (the same escaping `authproxy doctor` prints with).
    static func quoted(_ s: String) -> String { CredentialTOMLRenderer.quoted(s) }

    /// Structural equality (lines aside; NaN equals NaN, zero signs count).
    static func same(_ a: TOMLValue, _ b: TOMLValue) -> Bool {
        switch (a, b) {
        case (.string(let x), .string(let y)): return x == y
        case (.integer(let x), .integer(let y)): return x == y
        case (.float(let x), .float(let y)): return x.isNaN ? y.isNaN : x.bitPattern == y.bitPattern
        case (.bool(let x), .bool(let y)): return x == y
        case (.datetime(let x), .datetime(let y)): return x == y
        case (.array(let x), .array(let y)):
            return x.count == y.count && zip(x, y).allSatisfy { same($0.value, $1.value) }
        case (.table(let x), .table(let y)):
            return x.entries.count == y.entries.count
                && zip(x.entries, y.entries).allSatisfy { $0.key == $1.key && same($0.node.value, $1.node.value) }
        default: return false
        }
    }
}
