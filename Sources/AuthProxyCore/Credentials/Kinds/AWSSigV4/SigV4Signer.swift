#if canImport(Glibc)
    import Glibc
#endif

/// AWS Signature Version 4 (`AWS4-HMAC-SHA256`, header form) over a request as it will be sent. Pure: the caller
/// chooses the fields to sign and the payload hash; this builds the canonical request, the string to sign, the
/// signing key and the `Authorization` value.
struct SigV4Signer: Sendable, Equatable {
    var accessKeyID: String
    var secretAccessKey: String
    var region: String
    var service: String

    /// The request as signed.
    struct Request {
        var method: String
        /// The path and query exactly as sent.
        var pathAndQuery: String
        /// The fields to sign, `Host` and `X-Amz-Date` included, in any order and case; fields of the same name
        /// are joined with `,` in the order given.
        var fields: [(name: String, value: String)]
        /// Hex SHA-256 of the body, `UNSIGNED-PAYLOAD`, or the hash of nothing.
        var payloadHash: String
    }

    /// The hash of an empty body.
    static let emptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    static let unsignedPayload = "UNSIGNED-PAYLOAD"
    static let algorithm = "AWS4-HMAC-SHA256"

    /// What signing produced (the intermediate strings for tests and for explaining a mismatch).
    struct Signature: Equatable {
        var canonicalRequest: String
        var stringToSign: String
        var signedHeaders: String
        var signature: String
        var authorization: String
    }

    /// `20150830T123600Z` for `millis` since the epoch.
    static func amzDate(millis: Int64) -> String {
        var t = time_t(millis / 1000)
        var tmv = tm()
        gmtime_r(&t, &tmv)
        func pad(_ v: Int32, _ w: Int) -> String {
            let s = String(v)
            return String(repeating: "0", count: max(0, w - s.count)) + s
        }
        return "\(pad(tmv.tm_year + 1900, 4))\(pad(tmv.tm_mon + 1, 2))\(pad(tmv.tm_mday, 2))T"
            + "\(pad(tmv.tm_hour, 2))\(pad(tmv.tm_min, 2))\(pad(tmv.tm_sec, 2))Z"
    }

    /// Signs `request` for the instant `amzDate` (``amzDate(millis:)``: the value of its `X-Amz-Date` field).
    func sign(_ request: Request, amzDate: String) -> Signature {
        let path: Substring
        let query: Substring
        if let q = request.pathAndQuery.firstIndex(of: "?") {
            path = request.pathAndQuery[..<q]
            query = request.pathAndQuery[request.pathAndQuery.index(after: q)...]
        } else {
            path = request.pathAndQuery[...]
            query = ""
        }
        let (canonicalFields, signedHeaders) = Self.canonicalFields(request.fields)
        let canonicalRequest = [
            request.method,
            SigV4Encoding.canonicalURI(path: path, s3: service == "s3"),
            SigV4Encoding.canonicalQuery(query),
            canonicalFields,
            signedHeaders,
            request.payloadHash,
        ].joined(separator: "\n")
        let day = String(amzDate.prefix(8))
        let scope = "\(day)/\(region)/\(service)/aws4_request"
        let stringToSign = [
            Self.algorithm, amzDate, scope, Crypto.hex(Crypto.sha256(Array(canonicalRequest.utf8))),
        ].joined(separator: "\n")
        let signature = Crypto.hex(Crypto.hmacSHA256(key: signingKey(day: day), Array(stringToSign.utf8)))
        return Signature(
            canonicalRequest: canonicalRequest, stringToSign: stringToSign, signedHeaders: signedHeaders,
            signature: signature,
            authorization:
                "\(Self.algorithm) Credential=\(accessKeyID)/\(scope), SignedHeaders=\(signedHeaders), Signature=\(signature)"
        )
    }

    /// kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, day), region), service), "aws4_request").
    func signingKey(day: String) -> [UInt8] {
        var key = Crypto.hmacSHA256(key: Array("AWS4\(secretAccessKey)".utf8), Array(day.utf8))
        for part in [region, service, "aws4_request"] { key = Crypto.hmacSHA256(key: key, Array(part.utf8)) }
        return key
    }

    /// The canonical header block (`name:value\n` per field, names lower-cased and sorted, values trimmed with inner
    /// runs of spaces made one) and the signed header list (`host;x-amz-date`).
    static func canonicalFields(_ fields: [(name: String, value: String)]) -> (block: String, signed: String) {
        var byName: [String: [String]] = [:]
        var order: [String] = []
        for f in fields {
            let name = f.name.lowercased()
            if byName[name] == nil { order.append(name) }
            byName[name, default: []].append(trimAll(f.value))
        }
        order.sort { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        var block = ""
        for name in order { block += "\(name):\(byName[name]!.joined(separator: ","))\n" }
        return (block, order.joined(separator: ";"))
    }

    /// The value trimmed, inner runs of spaces and tabs made one space (SigV4's "Trimall").
    static func trimAll(_ value: String) -> String {
        var out: [UInt8] = []
        var pendingSpace = false
        for b in value.utf8 {
            if b == 0x20 || b == 0x09 {
                pendingSpace = !out.isEmpty
                continue
            }
            if pendingSpace {
                out.append(0x20)
                pendingSpace = false
            }
            out.append(b)
        }
        return String(decoding: out, as: UTF8.self)
    }
}
