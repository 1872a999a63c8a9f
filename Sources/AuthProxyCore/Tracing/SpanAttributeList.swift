import Tracing

/// A span's attributes as the proxy keeps them: a short list of (key, OTLP value) in the order first set, a key set
/// again replacing its value (what `SpanAttributes[key] = value` does). A span has about ten attributes: a linear
/// scan is cheaper than hashing every key into the dictionary `SpanAttributes` wraps, and the list goes to the
/// exporter as it is (``SpanRecord/attributes``), with no conversion at the end of each span. Pure.
struct SpanAttributeList: Sendable, Equatable {
    private(set) var items: [(String, SpanRecord.Value)] = []

    init() {}

    init(_ items: [(String, SpanRecord.Value)]) {
        for (k, v) in items { set(k, v) }
    }

    var isEmpty: Bool { items.isEmpty }

    /// The value of `key`, if set.
    subscript(key: String) -> SpanRecord.Value? {
        guard let i = index(of: key) else { return nil }
        return items[i].1
    }

    /// Sets `key` to `value`: replaced where already set, else appended.
    mutating func set(_ key: String, _ value: SpanRecord.Value) {
        if let i = index(of: key) {
            items[i].1 = value
        } else {
            // Room for a span's usual attributes at once, rather than growing the list four times.
            if items.capacity == 0 { items.reserveCapacity(12) }
            items.append((key, value))
        }
    }

    mutating func set(_ key: String, _ value: String) { set(key, .string(value)) }
    mutating func set(_ key: String, _ value: Int) { set(key, .int(Int64(value))) }
    mutating func set(_ key: String, _ value: Bool) { set(key, .bool(value)) }

    private func index(of key: String) -> Int? {
        // The byte count first: keys of other lengths (most) are told apart without comparing their text.
        let n = key.utf8.count
        return items.firstIndex { $0.0.utf8.count == n && $0.0 == key }
    }

    /// As swift-distributed-tracing's `SpanAttributes` (the `Span` protocol's `attributes`).
    var spanAttributes: SpanAttributes {
        var a = SpanAttributes()
        for (k, v) in items {
            switch v {
            case .string(let s): a[k] = SpanAttribute.string(s)
            case .bool(let b): a[k] = SpanAttribute.bool(b)
            case .int(let i): a[k] = SpanAttribute.int64(i)
            case .double(let d): a[k] = SpanAttribute.double(d)
            case .strings(let l): a[k] = SpanAttribute.stringArray(l)
            }
        }
        return a
    }

    /// From `SpanAttributes`: a value of a kind OTLP has no scalar for is kept as its text.
    init(_ attributes: SpanAttributes) {
        attributes.forEach { key, a in
            switch a {
            case .string(let s): items.append((key, .string(s)))
            case .bool(let b): items.append((key, .bool(b)))
            case .int32(let i): items.append((key, .int(Int64(i))))
            case .int64(let i): items.append((key, .int(i)))
            case .double(let d): items.append((key, .double(d)))
            case .stringArray(let l): items.append((key, .strings(l)))
            case .stringConvertible(let c): items.append((key, .string(c.description)))
            default: items.append((key, .string("\(a)")))
            }
        }
    }

    static func == (a: SpanAttributeList, b: SpanAttributeList) -> Bool {
        a.items.elementsEqual(b.items) { $0.0 == $1.0 && $0.1 == $1.1 }
    }
}
