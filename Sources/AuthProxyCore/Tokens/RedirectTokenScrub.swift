/// Keeps an injected token out of the URLs an upstream sends back in `Location` and `Content-Location`.
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

    /// `body` with every occurrence of `token` (as is, or percent-encoded) replaced by as many `*`: the length
    /// stays, so the response's framing does too. nil when it holds none. For the body of a redirect, whose
    /// HTML repeats the URL; a token split across two body chunks is not caught (such bodies are a few hundred
    /// bytes, one chunk).
    static func mask(_ body: UnsafeRawBufferPointer, token: String) -> [UInt8]? {
        var out: [UInt8]? = nil
        for form in Set([token, TokenInjection.percentEncoded(token)]) {
            let t = Array(form.utf8)
            guard !t.isEmpty, body.count >= t.count else { continue }
            var i = 0
            while i + t.count <= body.count {
                if body[i] == t[0], (0..<t.count).allSatisfy({ body[i + $0] == t[$0] }) {
                    if out == nil { out = Array(body) }
                    for k in 0..<t.count { out![i + k] = UInt8(ascii: "*") }
                    i += t.count
                } else {
                    i += 1
                }
            }
        }
        return out
    }

    /// `token=<t>`, however encoded.
    private static func isInjected(_ field: UnsafeRawBufferPointer, token: [UInt8]) -> Bool {
        guard let eq = field.firstIndex(of: UInt8(ascii: "=")),
            TokenInjection.fieldNameIs(field, Array("token".utf8))
        else { return false }
        return TokenInjection.percentDecoded(field[(eq + 1)...]) == token
    }
}
