/// An ordered list of header fields that keeps repeated fields (`Set-Cookie`) and their order.
/// Names keep the case they arrived with; look-ups are case-insensitive.
public struct HTTPHeaders: Sendable, Equatable, Sequence {
    public private(set) var fields: [(name: String, value: String)] = []
    /// The `Proxy-Authorization` field is one the proxy set for the destination
    /// (``setInjectedProxyAuthorization(_:)``): forwarded although hop-by-hop. The client's own never is.
    public private(set) var forwardsProxyAuthorization = false

    public init() {}
    public init(_ fields: [(String, String)]) {
        self.fields = fields.map { (name: $0.0, value: $0.1) }
    }

    public static func == (lhs: HTTPHeaders, rhs: HTTPHeaders) -> Bool {
        lhs.forwardsProxyAuthorization == rhs.forwardsProxyAuthorization
            && lhs.fields.elementsEqual(rhs.fields) { $0.name == $1.name && $0.value == $1.value }
    }

    public var count: Int { fields.count }

    public mutating func add(name: String, value: String) {
        fields.append((name: name, value: value))
    }

    /// Continues the last field with an obs-fold line (RFC 9112 §5.2: replaced by one space). Other fields
    /// of the same name (`Set-Cookie`) stay as they are.
    public mutating func continueLast(with more: some StringProtocol) {
        guard !fields.isEmpty else { return }
        fields[fields.count - 1].value += " " + more
    }

    public mutating func remove(name: String) {
        fields.removeAll { $0.name.caseInsensitiveEquals(name) }
        if forwardsProxyAuthorization, name.caseInsensitiveEquals("proxy-authorization") {
            forwardsProxyAuthorization = false
        }
    }

    /// Adds a field the proxy itself sets (an injected token, a `Referer` a token is bound to): the client's
    /// fields of that name go, and so does the name from the client's `Connection` lists, which would otherwise
    /// make the proxy drop its own field as hop-by-hop (`Connection: X-Esri-Authorization` stripped the token,
    /// and the upstream's refusals marked the credential rejected).
    public mutating func setInjected(name: String, value: String) {
        remove(name: name)
        for i in fields.indices
        where Self.connectionListing.contains(where: { fields[i].name.caseInsensitiveEquals($0) }) {
            let kept = fields[i].value.split(separator: ",").filter {
                !$0.trimmingHTTPWhitespace().caseInsensitiveEquals(name)
            }
            fields[i].value = kept.map { String($0.trimmingHTTPWhitespace()) }.joined(separator: ", ")
        }
        fields.removeAll { f in
            f.value.isEmpty && Self.connectionListing.contains(where: { f.name.caseInsensitiveEquals($0) })
        }
        add(name: name, value: value)
    }

    /// Sets `Proxy-Authorization` for the destination, not for the next hop: an identity-aware proxy that reads
    /// its token there (Google IAP) is the destination. The client's field (its credential for authproxy) goes,
    /// as ``setInjected(name:value:)`` removes it; this one is forwarded whatever the hop-by-hop rule says.
    public mutating func setInjectedProxyAuthorization(_ value: String) {
        setInjected(name: "Proxy-Authorization", value: value)
        forwardsProxyAuthorization = true
    }

    /// All values of `name`, in order.
    public func values(_ name: String) -> [String] {
        fields.compactMap { $0.name.caseInsensitiveEquals(name) ? $0.value : nil }
    }

    public func first(_ name: String) -> String? {
        fields.first { $0.name.caseInsensitiveEquals(name) }?.value
    }

    public func contains(_ name: String) -> Bool {
        fields.contains { $0.name.caseInsensitiveEquals(name) }
    }

    /// The comma-separated tokens of every `name` field, lower-cased and trimmed (for `Connection`,
    /// `Transfer-Encoding`).
    public func tokens(_ name: String) -> [String] {
        values(name).flatMap { $0.split(separator: ",") }.map { $0.trimmingHTTPWhitespace().lowercased() }
            .filter { !$0.isEmpty }
    }

    public func makeIterator() -> IndexingIterator<[(name: String, value: String)]> {
        fields.makeIterator()
    }

    /// Fields that never cross a proxy (RFC 9110 §7.6.1), plus whatever `Connection` names. The one list for
    /// both the String path (``isHopByHop(_:named:)``) and the byte path (``isHopByHop(bytes:)``).
    static let hopByHop: [String] = [
        "connection", "proxy-connection", "keep-alive", "proxy-authorization", "proxy-authenticate", "te",
        "trailer", "upgrade", "transfer-encoding",
    ]

    /// The fields whose comma-separated values name further hop-by-hop fields.
    static let connectionListing: [String] = ["connection", "proxy-connection"]

    /// The field names the `Connection`/`Proxy-Connection` fields list (lower-cased); usually none.
    public func connectionNamedFields() -> [String] {
        var named: [String] = []
        for f in fields where Self.connectionListing.contains(where: { f.name.caseInsensitiveEquals($0) }) {
            for t in f.value.split(separator: ",") {
                let token = t.trimmingHTTPWhitespace()
                if !token.isEmpty { named.append(token.lowercased()) }
            }
        }
        return named
    }

    /// Whether `name` is hop-by-hop, given the names listed in `Connection`. Allocation-free: it runs for
    /// every header of every request and response.
    static func isHopByHop(_ name: String, named: [String]) -> Bool {
        for h in hopByHop where name.caseInsensitiveEquals(h) { return true }
        for n in named where name.caseInsensitiveEquals(n) { return true }
        return false
    }

    /// Calls `body` with each field a request forwards upstream, in order: not hop-by-hop, and not one the upstream
    /// client writes itself (`Host` from the URL, `Content-Length` and `Expect` from the body's framing).
    func forEachForwardedField(_ body: (_ name: String, _ value: String) -> Void) {
        let named = connectionNamedFields()
        for f in fields {
            if Self.isHopByHop(f.name, named: named),
                !(forwardsProxyAuthorization && f.name.caseInsensitiveEquals("proxy-authorization"))
            {
                continue
            }
            if f.name.caseInsensitiveEquals("host") || f.name.caseInsensitiveEquals("content-length")
                || f.name.caseInsensitiveEquals("expect")
            {
                continue
            }
            body(f.name, f.value)
        }
    }

    /// ``hopByHop`` and ``connectionListing`` as bytes, for the byte path.
    private static let hopByHopBytes: [[UInt8]] = hopByHop.map { Array($0.utf8) }
    private static let connectionListingBytes: [[UInt8]] = connectionListing.map { Array($0.utf8) }

    /// ``isHopByHop(_:named:)`` for a name held as bytes, without the names listed in `Connection` (the caller
    /// checks those). Allocation-free.
    static func isHopByHop(bytes name: UnsafeRawBufferPointer) -> Bool {
        for h in hopByHopBytes where asciiCaseInsensitiveEquals(name, lowercased: h) { return true }
        return false
    }

    /// Whether a field name held as bytes is `Connection` or `Proxy-Connection`.
    static func isConnectionListing(bytes name: UnsafeRawBufferPointer) -> Bool {
        for h in connectionListingBytes where asciiCaseInsensitiveEquals(name, lowercased: h) { return true }
        return false
    }

    /// A copy without hop-by-hop fields, including the ones listed in `Connection`.
    public func removingHopByHop() -> HTTPHeaders {
        let named = connectionNamedFields()
        var out = HTTPHeaders()
        out.fields.reserveCapacity(fields.count + 3)
        for f in fields where !Self.isHopByHop(f.name, named: named) { out.fields.append(f) }
        return out
    }
}

/// `bytes` equals `lowercased` (ASCII, lower case) ignoring ASCII case: the rule of
/// ``StringProtocol/caseInsensitiveEquals(_:)`` for a name held as bytes.
@inlinable
func asciiCaseInsensitiveEquals(_ bytes: UnsafeRawBufferPointer, lowercased: [UInt8]) -> Bool {
    guard bytes.count == lowercased.count else { return false }
    for i in 0..<bytes.count {
        let x = bytes[i], y = lowercased[i]
        if x != y, !(x | 0x20 == y && y >= 0x61 && y <= 0x7a) { return false }
    }
    return true
}

/// `x` equals `y` ignoring ASCII case (either may be upper or lower case).
@inlinable @inline(__always)
func asciiEqualIgnoringCase(_ x: UInt8, _ y: UInt8) -> Bool {
    x == y || (x | 0x20 == y | 0x20 && (x | 0x20) >= 0x61 && (x | 0x20) <= 0x7a)
}

/// `x` equals `lower` (an ASCII lower-case letter or any other byte) ignoring ASCII case.
@inline(__always)
func asciiFoldedEqual(_ x: UInt8, _ lower: UInt8) -> Bool {
    x == lower || (lower >= 0x61 && lower <= 0x7a && x | 0x20 == lower)
}

/// `bytes` starts with `lowercased` (ASCII, lower case) ignoring ASCII case.
func asciiHasPrefixIgnoringCase(_ bytes: some Collection<UInt8>, _ lowercased: StaticString) -> Bool {
    let n = lowercased.utf8CodeUnitCount
    guard bytes.count >= n else { return false }
    let p = lowercased.utf8Start
    var i = 0
    for x in bytes.prefix(n) {
        if !asciiFoldedEqual(x, p[i]) { return false }
        i += 1
    }
    return true
}

/// `bytes` contains `lowercased` (ASCII, lower case letters and punctuation) ignoring ASCII case.
func asciiContainsIgnoringCase(_ bytes: some Collection<UInt8>, _ lowercased: StaticString) -> Bool {
    let n = lowercased.utf8CodeUnitCount, p = lowercased.utf8Start
    guard n > 0 else { return true }
    var index = bytes.startIndex
    var remaining = bytes.count
    while remaining >= n {
        var j = index, k = 0
        while k < n, asciiFoldedEqual(bytes[j], p[k]) {
            k += 1
            j = bytes.index(after: j)
        }
        if k == n { return true }
        index = bytes.index(after: index)
        remaining -= 1
    }
    return false
}

extension StringProtocol {
    /// ASCII case-insensitive equality (header names, schemes). Compares contiguous UTF-8 directly: a zip of
    /// the two UTF-8 views cost ~20 instructions per byte, and this runs for every header of every request.
    @inlinable
    func caseInsensitiveEquals(_ other: some StringProtocol) -> Bool {
        let a = self.utf8, b = other.utf8
        guard a.count == b.count else { return false }
        let fast = a.withContiguousStorageIfAvailable { pa in
            b.withContiguousStorageIfAvailable { pb in
                for i in 0..<pa.count where !asciiEqualIgnoringCase(pa[i], pb[i]) { return false }
                return true
            }
        }
        if let fast, let result = fast { return result }
        return zip(a, b).allSatisfy { asciiEqualIgnoringCase($0, $1) }
    }

    /// Without leading and trailing spaces and tabs (scanned as bytes: this runs for every header field).
    func trimmingHTTPWhitespace() -> Substring {
        let s = Substring(self)
        let u = s.utf8
        guard let first = u.firstIndex(where: { $0 != 32 && $0 != 9 }),
            let last = u.lastIndex(where: { $0 != 32 && $0 != 9 })
        else { return s[s.endIndex...] }
        return s[first..<u.index(after: last)]
    }

    /// An `Authorization`-style value split into its scheme and what follows it, both without surrounding
    /// spaces and tabs: `Basic dTpw` → (`Basic`, `dTpw`), `Bearer ` → (`Bearer`, ``). One reading for every place
    /// that looks at a scheme (proxy authentication, client tokens, client logins).
    func authorizationScheme() -> (scheme: Substring, credentials: Substring) {
        let v = trimmingHTTPWhitespace()
        guard let gap = v.utf8.firstIndex(where: { $0 == 32 || $0 == 9 }) else { return (v, v[v.endIndex...]) }
        return (v[..<gap], v[gap...].trimmingHTTPWhitespace())
    }
}
