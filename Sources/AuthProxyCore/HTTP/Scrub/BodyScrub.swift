/// Scrubs one response body on its way to the client: decodes it first when the upstream compressed it
/// (``StreamingInflate``), then masks every secret (``ResponseScrubber``).
///
/// Credentials that scrub ask for `Accept-Encoding: identity`, so a compressed answer is the exception (a server
/// that compresses regardless): it is relayed decoded, without its `Content-Encoding` and re-framed, rather than
/// decoded and compressed again. Measured (docs/BENCHMARKS.md, "Issue 37: response scrubbing"): compressing again
/// costs several times what the scan does, and the proxy sits next to its clients, where bytes are cheap.
///
/// Used from the connection's queue only.
final class BodyScrub {
    private var scrubber: ResponseScrubber
    private let inflate: StreamingInflate?
    /// What one upstream read may decode to at most: a compressed body expands on its way through, past the
    /// connection's flow control (a scrubber cannot hand bytes back), so a read that would expand further is a
    /// compression bomb and fails the response.
    static let maxDecodedPerRead = 16 * 1024 * 1024

    /// Why the body cannot be relayed scrubbed.
    struct Failure: Error, Equatable {
        var message: String
    }

    /// What to do with a response body.
    enum Plan {
        /// Relay it as it is: no secret to mask, no body, or a type that cannot echo one (``skips(contentType:)``).
        case relay
        /// Scrub it; `decodes`: the head loses its `Content-Encoding` and its length.
        case scrub(BodyScrub, decodes: Bool)
        /// It is compressed in a way the proxy cannot decode, so it cannot be scrubbed: the client gets a 502.
        case refuse(String)
    }

    private init(scrubber: ResponseScrubber, inflate: StreamingInflate?) {
        self.scrubber = scrubber
        self.inflate = inflate
    }

    /// Decides for a response with these fields.
    static func plan(secrets: [String], contentType: String?, contentEncoding: String?) -> Plan {
        guard let scrubber = ResponseScrubber(secrets: secrets), !skips(contentType: contentType) else { return .relay }
        let coding = contentEncoding?.trimmingHTTPWhitespace() ?? ""
        if coding.isEmpty || coding.caseInsensitiveEquals("identity") {
            return .scrub(BodyScrub(scrubber: scrubber, inflate: nil), decodes: false)
        }
        guard let encoding = BoundedInflate.Encoding(contentEncoding: String(coding)) else {
            return .refuse(
                "the upstream answered with Content-Encoding '\(coding)' although the proxy asked for identity; a body "
                    + "in that encoding cannot be searched for the credential's secrets, so it is not relayed")
        }
        return .scrub(BodyScrub(scrubber: scrubber, inflate: StreamingInflate(encoding)), decodes: true)
    }

    /// Media types whose bodies are not scanned: images (but SVG, which is XML), audio, video, fonts, and the
    /// binary tile and archive formats. A map client reads mostly these (tiles), they never echo a request URL in
    /// readable form, and a binary body could be damaged if a run of its bytes happened to spell a secret.
    static func skips(contentType: String?) -> Bool {
        guard let ct = contentType?.lowercased(), !ct.isEmpty else { return false }
        let media = String((ct.split(separator: ";", maxSplits: 1).first ?? "").trimmingHTTPWhitespace())
        if media.hasPrefix("image/") { return !media.hasPrefix("image/svg") }
        if media.hasPrefix("audio/") || media.hasPrefix("video/") || media.hasPrefix("font/") { return true }
        return [
            "application/x-protobuf", "application/vnd.mapbox-vector-tile", "application/zip", "application/gzip",
            "application/x-gzip", "application/pdf", "application/vnd.apache.parquet", "application/x-sqlite3",
        ].contains(media)
    }

    /// Scrubs the next bytes of the body; `emit` gets what can go to the client now.
    func feed(_ bytes: UnsafeRawBufferPointer, emit: (UnsafeRawBufferPointer) -> Void) throws(Failure) {
        guard let inflate else {
            scrubber.feed(bytes, emit: emit)
            return
        }
        var decoded = 0
        var tooLarge = false
        do throws(StreamingInflate.Failure) {
            try inflate.feed(bytes) { piece in
                decoded += piece.count
                if decoded > Self.maxDecodedPerRead { tooLarge = true }
                if !tooLarge { scrubber.feed(piece, emit: emit) }
            }
        } catch {
            throw Failure(message: error.message)
        }
        if tooLarge {
            throw Failure(
                message: "\(bytes.count) compressed bytes decode to more than \(Self.maxDecodedPerRead) bytes")
        }
    }

    /// The body ended: what was held back goes out. A compressed body that stopped before its end fails.
    func finish(emit: (UnsafeRawBufferPointer) -> Void) throws(Failure) {
        if let inflate, !inflate.isComplete {
            throw Failure(message: "the compressed body ended before its end")
        }
        scrubber.finish(emit: emit)
    }
}
