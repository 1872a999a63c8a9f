import CZlib

@testable import AuthProxyCore

/// The token-rejection sniffers (`Tokens/TokenRejection.swift`: JSON, JSONP, HTML) and the bounded inflater they read
/// compressed bodies with (`Tokens/BoundedInflate.swift`).
///
/// Input: one byte choosing the status, content type and content encoding, then the body.
///
/// Invariants:
/// - the verdict on a body does not depend on its encoding: the same body sent gzip-, zlib- or raw-deflate-compressed
///   gets the same answer as in clear;
/// - wrapping a JSON body in a JSONP callback does not change what the error-object reader sees;
/// - inflating never yields more than its limit, and a smaller limit yields a prefix of what a larger one yields.
enum TokenRejectionFuzzer {
    static let statuses = [200, 498, 499, 403, 500, 401, 302, 200]
    static let contentTypes: [String?] = [
        nil, "application/json", "text/html; charset=utf-8", "text/javascript", "image/png", "text/plain",
        "application/x-protobuf", "application/json;charset=UTF-8",
    ]
    static let encodings: [String?] = [nil, "gzip", "deflate", "identity"]

    static func run(_ input: UnsafeRawBufferPointer) {
        guard let selector = input.first else { return }
        let status = statuses[Int(selector & 7)]
        let contentType = contentTypes[Int(selector >> 3 & 7)]
        let encoding = encodings[Int(selector >> 6)]
        let body = Array(input.dropFirst())
        let verdict = TokenRejection.isRejection(
            status: status, contentType: contentType, contentEncoding: encoding, body: body)

        if encoding == nil || encoding == "identity" {
            for (name, windowBits) in [("gzip", Int32(31)), ("deflate", 15), ("deflate", -15)] {
                guard let compressed = deflate(body, windowBits: windowBits) else { continue }
                let v = TokenRejection.isRejection(
                    status: status, contentType: contentType, contentEncoding: name, body: compressed)
                invariant(
                    v == verdict,
                    "\(name) (window \(windowBits)) says \(v), clear says \(verdict): \(status) \(contentType ?? "-") \(describe(body))"
                )
            }
        } else if let e = BoundedInflate.Encoding(contentEncoding: encoding) {
            let small = 1 + Int(fuzzHash(input) % 97)
            let a = BoundedInflate.decode(body, encoding: e, limit: small)
            let b = BoundedInflate.decode(body, encoding: e, limit: TokenRejection.lookAhead)
            invariant((a?.count ?? 0) <= small, "inflated \(a?.count ?? 0) bytes, limit \(small)")
            invariant(
                (b?.count ?? 0) <= TokenRejection.lookAhead, "inflated \(b?.count ?? 0) bytes over the look-ahead")
            if let a, let b { invariant(b.starts(with: a), "limit \(small) output is not a prefix of the full output") }
        }

        if let first = body.firstIndex(where: { $0 != 32 && $0 != 9 && $0 != 10 && $0 != 13 }), body[first] == 123 {
            let plain = TokenRejection.errorObject(body)
            let wrapped = TokenRejection.errorObject(Array("callback_1.x (".utf8) + body)
            invariant(plain == wrapped, "JSONP-wrapped \(String(describing: wrapped)) vs \(String(describing: plain))")
        }
    }

    /// `bytes` compressed with zlib (windowBits 31: gzip, 15: zlib, -15: raw deflate); nil when the output would not
    /// fit the sniffer's look-ahead (then the verdicts may rightly differ).
    static func deflate(_ bytes: [UInt8], windowBits: Int32) -> [UInt8]? {
        var stream = z_stream()
        guard ap_deflate_init2(&stream, 6, windowBits) == Z_OK else { return nil }
        defer { deflateEnd(&stream) }
        var input = bytes
        var out = [UInt8](repeating: 0, count: Int(deflateBound(&stream, UInt(bytes.count))) + 64)
        var status: Int32 = Z_OK
        var produced = 0
        input.withUnsafeMutableBufferPointer { inp in
            out.withUnsafeMutableBufferPointer { outp in
                stream.next_in = inp.baseAddress
                stream.avail_in = UInt32(inp.count)
                stream.next_out = outp.baseAddress
                stream.avail_out = UInt32(outp.count)
                status = CZlib.deflate(&stream, Z_FINISH)
                produced = outp.count - Int(stream.avail_out)
            }
        }
        guard status == Z_STREAM_END, produced <= TokenRejection.lookAhead else { return nil }
        return Array(out[0..<produced])
    }
}
