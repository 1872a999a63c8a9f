/// The signature put on an outgoing request.
extension AWSSigV4Kind {
    /// The client's own signing fields: replaced, as the proxy's signature is the one that counts. (Other
    /// `X-Amz-*` fields say what the request does, `x-amz-acl`, `x-amz-meta-…`, and are kept and signed.)
    static let clientSigningFields = ["authorization", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token"]

    /// Besides `Host` and every `X-Amz-*` field (S3 refuses unsigned ones), the fields whose change would change
    /// what the request reads or writes: signed too, so a captured signature cannot be replayed with another body
    /// type or another byte range.
    static let alsoSignedFields = ["content-type", "content-md5", "range"]

    /// Signs `request` with `k` at `request.now`: the client's signing fields removed, `X-Amz-Date` (and for S3
    /// `X-Amz-Content-SHA256`, with a session `X-Amz-Security-Token`) set, then `Authorization`.
    func sign(_ request: inout OutgoingRequest, with k: AWSCredentials) -> ApplyFailure? {
        if Self.isPresigned(request.target.pathAndQuery) { return nil }
        let payloadHash: String
        if let body = request.body {
            payloadHash = Crypto.hex(Crypto.sha256(body))
        } else if request.bodyLength == 0 {
            payloadHash = SigV4Signer.emptyPayloadHash
        } else if request.bodyLength == nil {
            payloadHash = isS3 ? SigV4Signer.unsignedPayload : SigV4Signer.emptyPayloadHash
        } else if isS3 {
            payloadHash = SigV4Signer.unsignedPayload
        } else {
            let size = request.bodyLength.map { $0 < 0 ? "a chunked body" : "a body of \($0) bytes" } ?? "a body"
            return ApplyFailure(
                status: 413,
                message:
                    "Credential '\(request.credential)': service '\(service)' needs the body's hash in the signature, and \(size) is not held to compute it (max_signed_body_bytes = \(maxSignedBodyBytes); only a body with a known length up to it is)"
            )
        }
        for name in Self.clientSigningFields { request.fields.remove(name: name) }
        let amzDate = SigV4Signer.amzDate(millis: request.now)
        request.fields.setInjected(name: "X-Amz-Date", value: amzDate)
        if isS3 { request.fields.setInjected(name: "X-Amz-Content-SHA256", value: payloadHash) }
        if let session = k.sessionToken { request.fields.setInjected(name: "X-Amz-Security-Token", value: session) }

        let t = request.target
        var signed: [(name: String, value: String)] = [
            ("host", t.isDefaultPort ? t.urlHost : "\(t.urlHost):\(t.port)")
        ]
        // Only what really goes upstream: a field the client named in `Connection` is dropped on the way.
        request.fields.forEachForwardedField { name, value in
            let lower = name.lowercased()
            if lower.hasPrefix("x-amz-") || Self.alsoSignedFields.contains(lower) { signed.append((lower, value)) }
        }
        let signer = SigV4Signer(
            accessKeyID: k.accessKeyID, secretAccessKey: k.secretAccessKey, region: region, service: service)
        let signature = signer.sign(
            SigV4Signer.Request(
                method: request.method, pathAndQuery: t.pathAndQuery, fields: signed, payloadHash: payloadHash),
            amzDate: amzDate)
        request.fields.setInjected(name: "Authorization", value: signature.authorization)
        return nil
    }
}
