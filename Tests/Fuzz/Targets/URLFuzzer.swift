@testable import AuthProxyCore

/// The URL and match-prefix normalisers: request-target and authority parsing (`HTTP/RequestHeadParser.swift`),
/// credential match prefixes (`Config/MatchPrefix.swift`) and the path normaliser credentials are matched on
/// (`Access/PathNormalizer.swift`), on arbitrary text.
///
/// Invariants:
/// - a parsed absolute URL or CONNECT authority, written out again, parses to the same target;
/// - a match prefix written out again (its `description`, as `check` prints it) parses to the same prefix; it matches
///   its own URL and the paths below it, and not a path that merely starts with the same characters;
/// - a normal path has no dot-segments, and normalising it again changes nothing when every `%` of the input began
///   an escape. (A stray `%` is kept as is, so `%%32e` becomes `%2e`: decoding twice would go further, as it would for a
///   server that decodes twice; the normaliser decodes once, like the servers it stands in for.)
enum URLFuzzer {
    static func run(_ input: UnsafeRawBufferPointer) {
        let text = String(decoding: input, as: UTF8.self)

        if case .absolute(let t)? = try? RequestHeadParser.parseTarget(method: "GET", text) {
            let again = try? RequestHeadParser.parseTarget(method: "GET", t.url)
            invariant(again == .absolute(t), "\(t.url) parses to \(String(describing: again)), was \(t) from \(text)")
            invariant(HTTPURL.parse(text)?.target == t, "HTTPURL disagrees on \(text)")
        }
        if case .authority(let host, let port)? = try? RequestHeadParser.parseTarget(method: "CONNECT", text) {
            let written = (host.contains(":") ? "[\(host)]" : host) + ":\(port)"
            let again = try? RequestHeadParser.parseTarget(method: "CONNECT", written)
            invariant(again == .authority(host: host, port: port), "\(written) parses to \(String(describing: again))")
        }

        if let prefix = MatchPrefix.parse(text) {
            invariant(MatchPrefix.parse(prefix.description) == prefix, "\(prefix) does not round-trip (from \(text))")
            let host = prefix.wildcard ? "sub." + prefix.host : prefix.host
            let own = URLTarget(
                scheme: prefix.scheme, host: host, port: prefix.effectivePort, pathAndQuery: prefix.path + "/x?q=1")
            invariant(prefix.matches(own), "\(prefix) does not match \(own.url)")
            if !prefix.path.isEmpty {
                var exact = own
                exact.pathAndQuery = prefix.path + "?q=1"
                invariant(prefix.matches(exact), "\(prefix) does not match \(exact.url)")
                var longer = own
                longer.pathAndQuery = prefix.path + "x/y"
                invariant(!prefix.matches(longer), "\(prefix) matches \(longer.url)")
            }
            var otherPort = own
            otherPort.port = prefix.effectivePort == 80 ? 81 : 80
            invariant(!prefix.matches(otherPort), "\(prefix) matches port \(otherPort.port)")
        }

        let path = Substring(text.utf8.first == UInt8(ascii: "/") ? text : "/" + text)
        if case .normal(let p) = PathNormalizer.normalize(path) {
            invariant(p.utf8.first == UInt8(ascii: "/"), "\(path) normalises to \(p)")
            for segment in p.utf8.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false) {
                invariant(
                    !segment.elementsEqual([46]) && !segment.elementsEqual([46, 46]), "\(path) normalises to \(p)")
            }
            if escapesAreWellFormed(path.utf8) {
                let again = PathNormalizer.normalize(Substring(p))
                invariant(again == .normal(p), "\(path) normalises to \(p), which normalises to \(again)")
            }
        }
    }

    /// Whether every `%` starts a `%XX` escape.
    static func escapesAreWellFormed(_ u: Substring.UTF8View) -> Bool {
        let b = Array(u)
        var i = 0
        while i < b.count {
            if b[i] == UInt8(ascii: "%") {
                guard i + 2 < b.count, hexDigitValue(b[i + 1]) != nil, hexDigitValue(b[i + 2]) != nil else {
                    return false
                }
                i += 3
            } else {
                i += 1
            }
        }
        return true
    }
}
