@testable import AuthProxyCore

/// The response-head handling (`HTTP/ResponseHeadAssembler.swift`) on arbitrary upstream header lines, fed the way
/// the connection feeds libcurl's header callback: line by line until a final head ends (or the lines run out, when
/// the connection commits what it has), then written out as the client's head.
///
/// Only lines libcurl lets through are fed (``LibcurlModel``), and the status the assembler reads must be the one
/// libcurl frames the body by.
///
/// Invariants, on the head the client gets (whatever the upstream sent):
/// - it is refused (``ResponseHeadAssembler/violation``: the client gets the proxy's own 502), or it is one
///   well-formed HTTP/1.1 head: a `HTTP/1.1 DDD reason` status line, `token: value` fields, no CR, LF or NUL inside
///   a line (other control characters may stay, RFC 9110 §5.5), and one empty line at the very end (nothing the
///   upstream sent can end it early or smuggle a line break into it);
/// - its framing is the proxy's alone and unambiguous: at most one `Content-Length` or `Transfer-Encoding: chunked`,
///   never both, agreeing with the ``ResponseFraming`` returned; no hop-by-hop field of the upstream's; the proxy's
///   own `Connection` field when the connection closes (or for an HTTP/1.0 client that keeps it).
enum ResponseHeadFuzzer {
    static func run(_ input: UnsafeRawBufferPointer) {
        let h = fuzzHash(input)
        let options = ResponseHeadAssembler.Options(
            isHeadRequest: h & 1 != 0, clientMinorVersion: h & 2 != 0 ? 0 : 1, keepAlive: h & 4 != 0,
            corsOrigin: h & 8 != 0 ? "https://app.example" : nil, via: "1.1 authproxy")
        let answersChallenges = h & 16 != 0

        var assembler = ResponseHeadAssembler()
        var libcurl = LibcurlModel()
        var committed = false
        var start = 0
        for i in 0..<input.count where input[i] == 10 {
            guard let line = libcurl.deliver(UnsafeRawBufferPointer(rebasing: input[start...i])) else { return }
            start = i + 1
            if assembler.add(line: line) == .end, assembler.isFinal(answersChallenges: answersChallenges) {
                committed = true
                break
            }
        }
        if committed {
            invariant(
                assembler.status == libcurl.status,
                "status \(assembler.status), libcurl reads \(libcurl.status): \(describe(input))")
        }
        // A refused head never reaches the client (the connection answers 502 itself).
        if assembler.violation != nil { return }
        if !committed, assembler.status < 200 || !assembler.isComplete { assembler.substituteStatus(502) }
        var out = ByteBuffer()
        let framing = assembler.write(into: &out, options: options)
        let head = out.withUnreadBytes { Array($0) }
        check(head, framing: framing, status: assembler.status, options: options, input: input)
    }

    /// What libcurl 7.88 does with the header lines it reads, as far as the head goes: it fails the transfer (so the
    /// assembler never sees the rest) on a NUL ("Nul byte in header"), on a first line that is not an HTTP/1.x or 2
    /// status line with a three-digit code of at least 100 ("Unsupported response code"), and on a field line without
    /// a colon ("Header without colon"); it reads the status code after optional whitespace; a line that starts with
    /// CR or LF ends the head, and only that CR (LF) reaches the header callback.
    struct LibcurlModel {
        var atHeadStart = true
        var status = 0

        /// What the header callback gets for `raw`, or nil when libcurl fails the transfer.
        mutating func deliver(_ raw: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer? {
            if raw.contains(0) { return nil }
            var end = raw.count
            while end > 0, raw[end - 1] == 10 || raw[end - 1] == 13 { end -= 1 }
            let line = raw[0..<end]
            if atHeadStart {
                atHeadStart = false
                guard let code = Self.statusCode(line) else { return nil }
                status = code
                return raw
            }
            if raw[0] == 13 || raw[0] == 10 {
                atHeadStart = true
                let n = raw[0] == 13 && raw.count > 1 && raw[1] == 10 ? 2 : 1
                return UnsafeRawBufferPointer(rebasing: raw[0..<n])
            }
            return raw[0] == 32 || raw[0] == 9 || line.contains(58) ? raw : nil
        }

        /// `sscanf(line, " HTTP/%1d.%1d%c%3d%c")` with a space as the separator, or `HTTP/2 %d`.
        static func statusCode(_ line: Slice<UnsafeRawBufferPointer>) -> Int? {
            let b = Array(line)
            var i: Int
            if b.starts(with: Array("HTTP/1.0 ".utf8)) || b.starts(with: Array("HTTP/1.1 ".utf8)) {
                i = 9
            } else if b.starts(with: Array("HTTP/2 ".utf8)) {
                i = 7
            } else {
                return nil
            }
            while i < b.count, b[i] == 32 || (b[i] >= 9 && b[i] <= 13) { i += 1 }
            guard i + 3 <= b.count, b[i..<(i + 3)].allSatisfy({ $0 >= 48 && $0 <= 57 }) else { return nil }
            if i + 3 < b.count, b[i + 3] >= 48, b[i + 3] <= 57 { return nil }
            let code = Int(b[i] - 48) * 100 + Int(b[i + 1] - 48) * 10 + Int(b[i + 2] - 48)
            return code >= 100 ? code : nil
        }
    }

    static func check(
        _ head: [UInt8], framing: ResponseFraming, status: Int, options: ResponseHeadAssembler.Options,
        input: UnsafeRawBufferPointer
    ) {
        let context = "client head \(describe(head)) from \(describe(input))"
        invariant(
            head.count >= 4 && head.suffix(4).elementsEqual([13, 10, 13, 10]), "no empty line at the end: \(context)")
        for (i, b) in head.enumerated() {
            if b == 10 { invariant(i > 0 && head[i - 1] == 13, "bare LF at \(i): \(context)") }
            if b == 13 { invariant(i + 1 < head.count && head[i + 1] == 10, "bare CR at \(i): \(context)") }
        }
        var lines = split(head.dropLast(2))
        let statusLine = lines.removeFirst()
        invariant(
            statusLine.starts(with: Array("HTTP/1.1 ".utf8)) && statusLine.count >= 13
                && statusLine.dropFirst(9).prefix(3).allSatisfy { $0 >= 48 && $0 <= 57 }
                && statusLine[statusLine.startIndex + 12] == 32,
            "status line \(describe(statusLine)): \(context)")
        invariant(!statusLine.dropFirst(13).contains(0), "NUL in the reason phrase: \(context)")
        invariant((100...999).contains(status), "status \(status): \(context)")

        var contentLengths: [String] = []
        var transferEncodings: [String] = []
        var connection: [String] = []
        for line in lines {
            invariant(!line.isEmpty, "empty line inside the head: \(context)")
            guard let colon = line.firstIndex(of: 58) else {
                return invariant(false, "field without colon: \(context)")
            }
            let name = line[line.startIndex..<colon]
            let value = line[(colon + 1)...]
            invariant(value.first == 32, "no space after the colon: \(context)")
            invariant(!name.isEmpty && name.allSatisfy(isTokenChar), "field name \(describe(name)): \(context)")
            invariant(!value.contains(0), "NUL in the value of \(describe(name)): \(context)")
            let lower = String(decoding: name, as: UTF8.self).lowercased()
            let v = String(decoding: value.dropFirst(), as: UTF8.self)
            switch lower {
            case "content-length": contentLengths.append(v)
            case "transfer-encoding": transferEncodings.append(v)
            case "connection": connection.append(v)
            default:
                invariant(!HTTPHeaders.hopByHop.contains(lower), "upstream hop-by-hop field \(lower): \(context)")
            }
        }
        invariant(
            contentLengths.count + transferEncodings.count <= 1,
            "CL \(contentLengths), TE \(transferEncodings): \(context)")
        invariant(
            contentLengths == (framing.contentLength.map { ["\($0)"] } ?? []),
            "CL \(contentLengths) vs \(framing): \(context)")
        invariant(
            transferEncodings == (framing.chunked ? ["chunked"] : []),
            "TE \(transferEncodings) vs \(framing): \(context)")
        invariant(!(framing.chunked && framing.noBody), "chunked without a body: \(framing)")
        invariant(framing.contentLength.map { $0 >= 0 } ?? true, "negative length: \(framing)")
        if status == 204 { invariant(contentLengths.isEmpty, "Content-Length on a 204: \(context)") }
        invariant(
            framing.noBody == (options.isHeadRequest || status < 200 || status == 204 || status == 304),
            "noBody \(framing.noBody) for status \(status): \(context)")
        invariant(!framing.keepAlive || options.keepAlive, "keep-alive the request did not ask for")
        let expected = !framing.keepAlive ? ["close"] : options.clientMinorVersion == 0 ? ["keep-alive"] : []
        invariant(connection == expected, "Connection \(connection), expected \(expected): \(context)")
        if !framing.noBody, !framing.chunked, framing.contentLength == nil {
            invariant(!framing.keepAlive, "a close-delimited body on a kept connection: \(context)")
        }
    }

    /// The lines of a head, each ended by CRLF (a bare CR stays inside its line).
    static func split(_ head: ArraySlice<UInt8>) -> [ArraySlice<UInt8>] {
        var lines: [ArraySlice<UInt8>] = []
        var start = head.startIndex
        var i = head.startIndex
        while i + 1 < head.endIndex {
            if head[i] == 13, head[i + 1] == 10 {
                lines.append(head[start..<i])
                start = i + 2
                i += 2
            } else {
                i += 1
            }
        }
        return lines
    }
}
