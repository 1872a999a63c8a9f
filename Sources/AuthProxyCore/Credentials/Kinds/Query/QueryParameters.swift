/// The query parameters a `query` credential puts on every request (GeoServer's `authkey`, a tile vendor's `key`):
/// pure functions over a request target and an urlencoded form.
///
/// The proxy's value always wins: a client's parameter of the same name is removed first, from the query and from
/// a form body, compared by decoded name and ignoring ASCII case as a server does (`%61uthkey` and `AUTHKEY` are
/// `authkey` too), so a request never carries two values a server could choose between.
struct QueryParameters: Sendable, Equatable {
    struct Parameter: Sendable, Equatable {
        var name: String
        var value: String
        /// The name as compared with a request's fields (ASCII lowercase bytes).
        var lowercasedName: [UInt8] { Array(name.lowercased().utf8) }
    }

    let parameters: [Parameter]
    /// `name=value&…`, encoded once: what every request gets appended.
    let encoded: String
    private let names: [[UInt8]]

    init(_ parameters: [Parameter]) {
        self.parameters = parameters
        encoded = parameters.map {
            TokenInjection.percentEncoded($0.name) + "=" + TokenInjection.percentEncoded($0.value)
        }
        .joined(separator: "&")
        names = parameters.map(\.lowercasedName)
    }

    /// Whether a parameter name can be configured: printable ASCII without the bytes that delimit or encode a
    /// query (`&`, `=`, `#`, `?`, `%`, `+`) and without spaces.
    static func isValidName(_ name: String) -> Bool {
        !name.isEmpty
            && name.utf8.allSatisfy { b in
                b > 32 && b < 127 && !"&=#?%+".utf8.contains(b)
            }
    }

    /// Whether a value can be sent: no control bytes (a line break would end up in a request line).
    static func isSendable(_ value: String) -> Bool {
        value.utf8.allSatisfy { $0 >= 32 && $0 != 127 }
    }

    /// `pathAndQuery` without the client's fields of these names, with the parameters appended (the fragment, which
    /// a client should not send, stays last).
    func applied(to pathAndQuery: String) -> String {
        let u = Array(pathAndQuery.utf8)
        let fragment = u.firstIndex(of: UInt8(ascii: "#")) ?? u.count
        let q = u[..<fragment].firstIndex(of: UInt8(ascii: "?"))
        var out: [UInt8] = Array(u[..<(q ?? fragment)])
        out.reserveCapacity(u.count + encoded.utf8.count + 2)
        out.append(UInt8(ascii: "?"))
        if let q {
            let kept = removingFields(u[(q + 1)..<fragment])
            if !kept.isEmpty {
                out.append(contentsOf: kept)
                out.append(UInt8(ascii: "&"))
            }
        }
        out.append(contentsOf: encoded.utf8)
        out.append(contentsOf: u[fragment...])
        return String(decoding: out, as: UTF8.self)
    }

    /// An urlencoded form without the client's fields of these names; nil when it has none (nearly always: nothing
    /// is copied then).
    func removing(fromForm form: [UInt8]) -> [UInt8]? {
        let kept = removingFields(form[...])
        return kept.count == form.count ? nil : kept
    }

    /// The `&`-separated fields of `bytes` whose decoded name is none of these, joined again (empty fields drop).
    private func removingFields(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var removedAny = false
        Array(bytes).withUnsafeBytes { b in
            var start = 0
            while start <= b.count {
                var end = start
                while end < b.count, b[end] != UInt8(ascii: "&") { end += 1 }
                let field = UnsafeRawBufferPointer(rebasing: b[start..<end])
                if names.contains(where: { TokenInjection.fieldNameIs(field, $0) }), !field.isEmpty {
                    removedAny = true
                } else if !field.isEmpty {
                    if !out.isEmpty { out.append(UInt8(ascii: "&")) }
                    out.append(contentsOf: field)
                }
                start = end + 1
            }
        }
        // Nothing removed: the bytes as they were (empty fields included), so an untouched form keeps its length.
        return removedAny ? out : Array(bytes)
    }
}
