/// Keeps an injected token out of what an upstream sends back: the URLs of `Location`, `Content-Location` and
/// `Refresh`, every other header value, and the bodies of redirects.
///
/// A server that redirects echoes the request target, and the target it got carries the token the proxy put
/// in (IIS and the Web Adaptor's http→https redirect, a trailing-slash redirect, a portal sign-in hop). Relayed
/// as is, the organisation's token or API key would reach the client, its logs and history, and a client that
/// follows the redirect would send it itself, perhaps to another host. The `token` query fields whose value is
/// the injected token are removed; everything else in the URL stays byte for byte. A client that follows the
/// cleaned URL through the proxy gets the token injected again.
enum RedirectTokenScrub {
    /// `value` without the query fields `token=<token>` (name in any case, name and value percent-decoded
    /// before comparing); nil when it has none (nearly always: then nothing is copied).
    static func scrub(_ value: UnsafeRawBufferPointer, token: String) -> [UInt8]? {
        let t = Array(token.utf8)
        guard !t.isEmpty, let q = value.firstIndex(of: UInt8(ascii: "?")) else { return nil }
        let fragment = value[(q + 1)...].firstIndex(of: UInt8(ascii: "#")) ?? value.count
        let query = UnsafeRawBufferPointer(rebasing: value[(q + 1)..<fragment])
        var kept: [UnsafeRawBufferPointer] = []
        var removed = false
        var start = 0
        while start <= query.count {
            let end = query[start...].firstIndex(of: UInt8(ascii: "&")) ?? query.count
            let field = UnsafeRawBufferPointer(rebasing: query[start..<end])
            if isInjected(field, token: t) {
                removed = true
            } else if !field.isEmpty || end < query.count {
                kept.append(field)
            }
            start = end + 1
        }
        guard removed else { return nil }
        var out = Array(value[..<q])
        let nonEmpty = kept.filter { !$0.isEmpty }
        if !nonEmpty.isEmpty {
            out.append(UInt8(ascii: "?"))
            for (i, f) in nonEmpty.enumerated() {
                if i > 0 { out.append(UInt8(ascii: "&")) }
                out.append(contentsOf: f)
            }
        }
        out.append(contentsOf: value[fragment...])
        return out
    }

    /// `bytes` with every occurrence of `token`, in any encoding ``EncodedTokenFinder`` knows, replaced by as
    /// many `*`: the length stays, so a body's framing does too. nil when it holds none. For every response header
    /// value (after ``scrub(_:token:)`` on URLs) and the body of a redirect, whose HTML repeats the URL; a token
    /// split across two body chunks is not caught (such bodies are a few hundred bytes, one chunk).
    static func mask(_ bytes: UnsafeRawBufferPointer, token: String) -> [UInt8]? {
        EncodedTokenFinder(token).flatMap { mask(bytes, finder: $0) }
    }

    static func mask(_ bytes: UnsafeRawBufferPointer, finder: EncodedTokenFinder) -> [UInt8]? {
        let found = finder.ranges(in: bytes)
        guard !found.isEmpty else { return nil }
        var out = Array(bytes)
        for r in found { for k in r { out[k] = UInt8(ascii: "*") } }
        return out
    }

    /// A response header value as the client gets it: a URL field (`Location`, `Content-Location`, `Refresh`)
    /// loses its `token=<token>` query fields, and what is left of the token anywhere, in any encoding (nested
    /// in `ReturnUrl=`, after `&amp;` or `;`, in `Link` or `Set-Cookie`), is masked. nil when nothing changed.
    /// `finder` is made once for all of a head's fields.
    static func clean(_ value: UnsafeRawBufferPointer, finder: EncodedTokenFinder, token: String, isURLField: Bool)
        -> [UInt8]?
    {
        if isURLField, let scrubbed = scrub(value, token: token) {
            return scrubbed.withUnsafeBytes { mask($0, finder: finder) } ?? scrubbed
        }
        return mask(value, finder: finder)
    }

    /// `token=<t>`, however encoded.
    private static func isInjected(_ field: UnsafeRawBufferPointer, token: [UInt8]) -> Bool {
        guard let eq = field.firstIndex(of: UInt8(ascii: "=")),
            TokenInjection.fieldNameIs(field, Array("token".utf8))
        else { return false }
        return TokenInjection.percentDecoded(field[(eq + 1)...]) == token
    }
}
