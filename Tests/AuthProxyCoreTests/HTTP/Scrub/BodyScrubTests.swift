import CZlib
import Testing

@testable import AuthProxyCore

/// zlib's own compression of `bytes` (gzip: windowBits 31; zlib: 15; raw deflate: -15).
private func compress(_ bytes: [UInt8], windowBits: Int32) -> [UInt8] {
    var stream = z_stream()
    let status = deflateInit2_(
        &stream, 6, Z_DEFLATED, windowBits, 8, Z_DEFAULT_STRATEGY, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size))
    precondition(status == Z_OK)
    defer { deflateEnd(&stream) }
    var out = [UInt8](repeating: 0, count: Int(deflateBound(&stream, UInt(bytes.count))) + 64)
    var input = bytes
    let produced = input.withUnsafeMutableBufferPointer { i in
        out.withUnsafeMutableBufferPointer { o in
            stream.next_in = i.baseAddress
            stream.avail_in = UInt32(i.count)
            stream.next_out = o.baseAddress
            stream.avail_out = UInt32(o.count)
            precondition(deflate(&stream, Z_FINISH) == Z_STREAM_END)
            return o.count - Int(stream.avail_out)
        }
    }
    return Array(out[0..<produced])
}

private func run(_ scrub: BodyScrub, _ body: [UInt8], piece: Int) throws(BodyScrub.Failure) -> [UInt8] {
    var out: [UInt8] = []
    var failure: BodyScrub.Failure?
    var at = 0
    while at < body.count, failure == nil {
        let end = min(body.count, at + piece)
        Array(body[at..<end]).withUnsafeBytes { b in
            do throws(BodyScrub.Failure) {
                try scrub.feed(b) { out.append(contentsOf: $0) }
            } catch {
                failure = error
            }
        }
        at = end
    }
    if let failure { throw failure }
    try scrub.finish { out.append(contentsOf: $0) }
    return out
}

@Suite struct BodyScrubTests {
    let key = "k3y-ABCDEF0123456789"
    var document: [UInt8] {
        var s = "<?xml version=\"1.0\"?>\n<WMS_Capabilities>\n"
        for i in 0..<2000 {
            s +=
                "<Layer><Name>layer\(i)</Name><OnlineResource xlink:href=\"http://gs/ows?authkey=\(key)&amp;x=\(i)\"/></Layer>\n"
        }
        return Array((s + "</WMS_Capabilities>\n").utf8)
    }

    @Test func compressedBodiesAreDecodedAndScrubbed() throws {
        for (coding, bits) in [("gzip", Int32(31)), ("x-gzip", 31), ("deflate", 15), ("deflate", -15)] {
            let compressed = compress(document, windowBits: bits)
            for piece in [7, 1000, compressed.count] {
                guard
                    case .scrub(let scrub, let decodes) = BodyScrub.plan(
                        secrets: [key], contentType: "text/xml", contentEncoding: coding)
                else {
                    Issue.record("\(coding) was not scrubbed")
                    continue
                }
                #expect(decodes)
                let out = try run(scrub, compressed, piece: piece)
                let text = String(decoding: out, as: UTF8.self)
                #expect(out.count == document.count)
                #expect(!text.contains(key))
                #expect(text.contains("layer1999"))
            }
        }
    }

    @Test func concatenatedGzipMembersDecodeInOrder() throws {
        let a = compress(Array("first \(key) ".utf8), windowBits: 31)
        let b = compress(Array("second \(key)".utf8), windowBits: 31)
        guard case .scrub(let scrub, _) = BodyScrub.plan(secrets: [key], contentType: nil, contentEncoding: "gzip")
        else {
            Issue.record("not scrubbed")
            return
        }
        let out = String(decoding: try run(scrub, a + b, piece: 5), as: UTF8.self)
        #expect(
            out
                == "first \(String(repeating: "*", count: key.count)) second \(String(repeating: "*", count: key.count))"
        )
    }

    @Test func aTruncatedOrInvalidCompressedBodyFails() {
        let compressed = compress(document, windowBits: 31)
        guard case .scrub(let cut, _) = BodyScrub.plan(secrets: [key], contentType: nil, contentEncoding: "gzip"),
            case .scrub(let bad, _) = BodyScrub.plan(secrets: [key], contentType: nil, contentEncoding: "gzip")
        else {
            Issue.record("not scrubbed")
            return
        }
        #expect(throws: BodyScrub.Failure.self) {
            try run(cut, Array(compressed[0..<(compressed.count / 2)]), piece: 100)
        }
        #expect(throws: BodyScrub.Failure.self) { try run(bad, Array("not gzip at all".utf8), piece: 100) }
    }

    @Test func aCompressionBombFails() {
        let zeros = compress([UInt8](repeating: 0, count: BodyScrub.maxDecodedPerRead + 1024), windowBits: 31)
        guard case .scrub(let scrub, _) = BodyScrub.plan(secrets: [key], contentType: nil, contentEncoding: "gzip")
        else {
            Issue.record("not scrubbed")
            return
        }
        #expect(throws: BodyScrub.Failure.self) { try run(scrub, zeros, piece: zeros.count) }
    }

    @Test func binaryTypesAreRelayedAndUnknownCodingsRefused() {
        for type in [
            "image/png", "IMAGE/JPEG; q=1", "application/x-protobuf", "application/vnd.mapbox-vector-tile",
            "font/woff2",
        ] {
            guard case .relay = BodyScrub.plan(secrets: [key], contentType: type, contentEncoding: nil) else {
                Issue.record("\(type) was scanned")
                continue
            }
        }
        for type in [
            "image/svg+xml", "application/json", "text/html; charset=utf-8", "application/vnd.ogc.wms_xml", nil,
        ] {
            guard
                case .scrub(_, let decodes) = BodyScrub.plan(
                    secrets: [key], contentType: type, contentEncoding: "identity")
            else {
                Issue.record("\(type ?? "no type") was not scanned")
                continue
            }
            #expect(!decodes)
        }
        guard case .refuse(let why) = BodyScrub.plan(secrets: [key], contentType: "text/xml", contentEncoding: "br")
        else {
            Issue.record("br was not refused")
            return
        }
        #expect(why.contains("'br'"))
        guard case .relay = BodyScrub.plan(secrets: [], contentType: "text/xml", contentEncoding: "br") else {
            Issue.record("no secret, still scanned")
            return
        }
    }
}
