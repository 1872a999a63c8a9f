/// What a client sends first inside a CONNECT tunnel to a matched host, which decides how the proxy serves it:
/// TLS (a ClientHello: intercepted, or relayed blind where allowed), plain HTTP (browsers, .NET `ClientWebSocket`
/// and Python `websockets` tunnel even `ws://` through CONNECT: the requests are served as `http://host:port`
/// ones), or anything else (refused: a matched host never becomes a raw tunnel past `connect_ports`).
///
/// Pure: it looks at bytes only, so each rule is unit-tested.
enum TunnelContent: Equatable {
    /// Not enough bytes yet to tell.
    case needMore
    /// A TLS handshake record (content type 22).
    case tls
    /// An HTTP/1.x request line: `METHOD SP` and the start of a request target.
    case http
    case other

    /// Longest method name taken for HTTP (the registered ones have at most 17 letters).
    static let maxMethod = 20

    static func classify(_ bytes: UnsafeRawBufferPointer) -> TunnelContent {
        guard let first = bytes.first else { return .needMore }
        if first == 0x16 { return .tls }
        var i = 0
        while i < bytes.count, i < maxMethod, isUpper(bytes[i]) || bytes[i] == UInt8(ascii: "-") { i += 1 }
        if i == bytes.count { return .needMore }
        guard i > 0, isUpper(bytes[0]), bytes[i] == 32 else { return .other }
        if i + 1 == bytes.count { return .needMore }
        let c = bytes[i + 1]
        // Origin form (`/`), `*` (OPTIONS), or an absolute URL (`http://`).
        return c == UInt8(ascii: "/") || c == UInt8(ascii: "*") || isLetter(c) ? .http : .other
    }

    private static func isUpper(_ c: UInt8) -> Bool { c >= 65 && c <= 90 }
    private static func isLetter(_ c: UInt8) -> Bool { isUpper(c) || (c >= 97 && c <= 122) }
}
