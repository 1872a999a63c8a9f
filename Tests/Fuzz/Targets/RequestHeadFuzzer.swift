@testable import AuthProxyCore

/// The request head parser (`HTTP/RequestHeadParser.swift`) on arbitrary bytes.
///
/// Invariants:
/// - the result does not depend on how the bytes arrived: parsing a prefix first (as a connection does when a head
///   comes in several reads) and then the whole buffer gives what parsing the whole buffer at once gives;
/// - an accepted head is sane: it consumed at most the input, its field names are tokens, its values and target hold
///   no CR, LF or NUL, and its framing agrees with its `Content-Length`/`Transfer-Encoding` fields;
/// - an accepted head, written out again, parses to the same head (no field, framing or target changes meaning);
/// - removing hop-by-hop fields (what the proxy forwards) leaves none of them.
enum RequestHeadFuzzer {
    static func run(_ input: UnsafeRawBufferPointer) {
        var parser = RequestHeadParser()
        let whole = parser.parse(input)

        if input.count > 1 {
            let split = 1 + Int(fuzzHash(input) % UInt64(input.count - 1))
            var incremental = RequestHeadParser()
            let first = incremental.parse(UnsafeRawBufferPointer(rebasing: input[..<split]))
            switch first {
            case .needMore:
                let second = incremental.parse(input)
                invariant(
                    second == whole, "split at \(split): \(second) after needMore, \(whole) at once: \(describe(input))"
                )
            case .complete:
                invariant(
                    first == whole, "split at \(split): \(first) from the prefix, \(whole) at once: \(describe(input))")
            case .failed:
                guard case .failed = whole else {
                    invariant(false, "split at \(split): prefix \(first), whole \(whole): \(describe(input))")
                    return
                }
            }
        }

        guard case .complete(let head, let consumed) = whole else { return }
        invariant(consumed > 0 && consumed <= input.count, "consumed \(consumed) of \(input.count)")
        checkSane(head)

        let text = serialize(head)
        var again = RequestHeadParser()
        let reparsed = text.withUnsafeBytes { again.parse($0) }
        invariant(
            reparsed == .complete(head, consumed: text.count),
            "re-serialised head parses differently: \(reparsed) vs \(head) from \(describe(text))")

        for f in head.headers.removingHopByHop() {
            invariant(
                !HTTPHeaders.isHopByHop(f.name, named: head.headers.connectionNamedFields()),
                "hop-by-hop field \(f.name) left after removal")
        }
    }

    private static func checkSane(_ head: RequestHead) {
        invariant(!head.method.isEmpty && head.method.utf8.allSatisfy(isTokenChar), "method \(head.method)")
        for f in head.headers {
            invariant(
                !f.name.isEmpty && f.name.utf8.allSatisfy(isTokenChar), "field name \(describe(Array(f.name.utf8)))")
            invariant(
                !f.value.utf8.contains { $0 == 13 || $0 == 10 || $0 == 0 },
                "CR, LF or NUL in the value of \(f.name): \(describe(Array(f.value.utf8)))")
            invariant(
                f.value.utf8.first.map { $0 != 32 && $0 != 9 } ?? true
                    && f.value.utf8.last.map { $0 != 32 && $0 != 9 } ?? true,
                "untrimmed value of \(f.name)")
        }
        let te = head.headers.values("transfer-encoding")
        let cl = head.headers.values("content-length")
        switch head.framing {
        case .chunked:
            invariant(!te.isEmpty && cl.isEmpty, "chunked framing with TE \(te), CL \(cl)")
            invariant(head.minorVersion == 1, "chunked framing in HTTP/1.0")
        case .contentLength(let n):
            invariant(te.isEmpty && !cl.isEmpty && n >= 0, "length \(n) with TE \(te), CL \(cl)")
            for field in cl {
                for part in field.split(separator: ",", omittingEmptySubsequences: false) {
                    invariant(Int64(part.trimmingHTTPWhitespace()) == n, "CL values \(cl) but framing \(n)")
                }
            }
        case .none:
            invariant(te.isEmpty && cl.isEmpty, "no framing with TE \(te), CL \(cl)")
        }
        if head.method == "CONNECT" {
            guard case .authority = head.target else { return invariant(false, "CONNECT with \(head.target)") }
        }
        switch head.target {
        case .absolute(let t):
            invariant(t.scheme == "http" || t.scheme == "https", "scheme \(t.scheme)")
            invariant(!t.host.isEmpty && t.host == t.host.lowercased(), "host \(t.host)")
            invariant(t.port > 0 && t.port < 65536, "port \(t.port)")
            invariant(t.pathAndQuery.utf8.first == UInt8(ascii: "/"), "path \(t.pathAndQuery)")
            invariant(
                !t.pathAndQuery.utf8.contains { $0 <= 0x20 || $0 >= 0x7f || $0 == 35 }, "path bytes \(t.pathAndQuery)")
        case .authority(let host, let port):
            invariant(!host.isEmpty && port > 0 && port < 65536, "authority \(host):\(port)")
        case .origin(let path):
            invariant(path == "*" || path.utf8.first == UInt8(ascii: "/"), "origin-form \(path)")
        }
    }

    /// The head as a client would write it, target in the form it was parsed from.
    static func serialize(_ head: RequestHead) -> [UInt8] {
        var s = head.method + " "
        switch head.target {
        case .absolute(let t): s += t.url
        case .authority(let host, let port): s += (host.utf8.contains(58) ? "[\(host)]" : host) + ":\(port)"
        case .origin(let path): s += path
        }
        s += " HTTP/1.\(head.minorVersion)\r\n"
        for f in head.headers { s += "\(f.name): \(f.value)\r\n" }
        s += "\r\n"
        return Array(s.utf8)
    }
}
