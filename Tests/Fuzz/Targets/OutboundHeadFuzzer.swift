@testable import AuthProxyCore

/// The check on every head the proxy writes upstream (`HTTP/OutboundHead.swift`) against the proxy's own request
/// parser, on arbitrary methods, targets and fields (what a token, key or header credential could put there).
///
/// The input is read as length-prefixed pieces (one byte of length, then the bytes): the method, the target, then
/// field names and values in turn, so that every byte, CR, LF and NUL included, can land anywhere.
///
/// Invariants:
/// - a head the check passes, written out as the proxy writes it, parses back to the same method, target and
///   fields, consuming all of it: no field can end the head early or hide a second request;
/// - a head the check refuses does not parse back to what was meant to be written (the check refuses nothing the
///   parser reads as written, so it is not stricter than it needs to be).
enum OutboundHeadFuzzer {
    /// Fields whose meaning the parser checks beyond their bytes (framing, the one `Host`): left out, so that a
    /// refusal of the parser always means a byte it would not read.
    static let framingFields: Set<String> = ["host", "content-length", "transfer-encoding", "expect"]

    static func run(_ input: UnsafeRawBufferPointer) {
        var pieces: [String] = []
        var i = 0
        while i < input.count {
            let n = Int(input[i])
            let end = min(input.count, i + 1 + n)
            pieces.append(String(decoding: UnsafeRawBufferPointer(rebasing: input[(i + 1)..<end]), as: UTF8.self))
            i = end
        }
        guard pieces.count >= 2 else { return }
        let method = pieces[0]
        let target = "/" + pieces[1]
        var fields = HTTPHeaders()
        var j = 2
        while j + 1 < pieces.count {
            if !framingFields.contains(pieces[j].lowercased()) { fields.add(name: pieces[j], value: pieces[j + 1]) }
            j += 2
        }
        let problem = OutboundHead.problem(method: method, target: target, fields: fields)

        var text = "\(method) \(target) HTTP/1.1\r\nHost: fuzz\r\n"
        for f in fields.fields { text += "\(f.name): \(f.value)\r\n" }
        text += "\r\n"
        let bytes = Array(text.utf8)
        var parser = RequestHeadParser()
        let parsed = bytes.withUnsafeBytes { parser.parse($0) }
        var expected = HTTPHeaders([("Host", "fuzz")])
        for f in fields.fields { expected.add(name: f.name, value: f.value) }
        let roundTrips: Bool
        if case .complete(let head, let consumed) = parsed, consumed == bytes.count, head.method == method,
            case .origin(let path) = head.target, path == target, head.headers == expected
        {
            roundTrips = true
        } else {
            roundTrips = false
        }
        if problem == nil {
            invariant(roundTrips, "a head the check passed parses as \(parsed): \(describe(bytes))")
        } else {
            invariant(
                !roundTrips, "the check refused (\(problem!.message)) a head that parses as written: \(describe(bytes))"
            )
        }
    }
}
