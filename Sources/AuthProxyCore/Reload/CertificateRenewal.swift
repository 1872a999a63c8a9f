import COpenSSL

/// What became of the certificate files of the running credentials when some of them changed on disk (a renewal
/// by cert-manager or a PKI team): the credentials to run with now, and what to tell the operator.
///
/// A renewed file is adopted only when it can be used: a client certificate whose files load and whose key
/// belongs to its certificate (``ClientCertificateCheck``), a CA bundle whose every certificate parses. A file
/// that is half-written, opens with the wrong password, or a certificate renewed before its key (two files
/// written one after the other) is refused: the certificate in use stays, and the refusal names the file and the
/// cause. The next change of the files is looked at again, so the key arriving a moment later completes the pair.
///
/// Pure apart from reading the files (`load`, `read` are injectable).
public enum CertificateRenewal {
    enum Event: Equatable {
        /// A renewed client certificate was adopted: new connections present it.
        case certificateRenewed(credential: String, notAfter: Int64?)
        /// A renewed CA bundle was adopted: new connections are verified with it.
        case caRenewed(credential: String, file: String)
        /// A changed file could not be used; the one in use stays.
        case refused(credential: String, file: String, cause: String)
    }

    struct Outcome {
        /// The credentials with every adopted renewal; nil when nothing was adopted.
        var credentials: [Credential]?
        var events: [Event]
    }

    /// Looks again at the files of the credentials that name one of `changed` (paths as configured).
    static func renew(
        _ credentials: [Credential], changed: Set<String>,
        load: (ClientCertificateSettings) -> Result<ClientCertificateMaterial, ClientCertificateCheck.Problem> =
            ClientCertificateCheck.load,
        read: (String) -> [UInt8]? = readFileBytes
    ) -> Outcome {
        var next = credentials
        var adopted = false
        var events: [Event] = []
        for (i, c) in credentials.enumerated() {
            if var s = c.kind as? ClientCertificateSettings {
                guard [s.file, s.cert, s.key].contains(where: { $0.map(changed.contains) ?? false }) else { continue }
                switch load(s) {
                case .success(let m):
                    guard m != s.material else { continue }  // the same contents written again
                    s.material = m
                    next[i].kind = s
                    adopted = true
                    events.append(.certificateRenewed(credential: c.name, notAfter: m.notAfter))
                case .failure(let p):
                    events.append(.refused(credential: c.name, file: p.file, cause: p.message))
                }
            } else if let t = c.kind as? ServerTrustSettings {
                guard let file = t.caFile, changed.contains(file) else { continue }
                guard let bytes = read(file) else {
                    events.append(
                        .refused(credential: c.name, file: file, cause: "cannot read '\(file)': \(lastErrorString())"))
                    continue
                }
                if let why = caBundleProblem(bytes, file: file) {
                    events.append(.refused(credential: c.name, file: file, cause: why))
                    continue
                }
                let renewed = ServerTrustSettings(
                    caFile: file, pinnedPublicKey: t.pinnedPublicKey, insecure: t.insecure, caBundle: bytes)
                guard renewed != t else { continue }
                next[i].kind = renewed
                adopted = true
                events.append(.caRenewed(credential: c.name, file: file))
            }
        }
        return Outcome(credentials: adopted ? next : nil, events: events)
    }

    /// Why `bytes` is no usable PEM CA bundle, nil when every certificate in it parses (a bundle cut short in the
    /// middle of a certificate has one `BEGIN CERTIFICATE` more than certificates that parse).
    static func caBundleProblem(_ bytes: [UInt8], file: String) -> String? {
        let text = String(decoding: bytes, as: UTF8.self)
        let begun = text.components(separatedBy: "-----BEGIN CERTIFICATE-----").count - 1
        guard begun > 0 else { return "'\(file)' holds no PEM certificate" }
        var parsed = 0
        bytes.withUnsafeBytes { b in
            let bio = BIO_new_mem_buf(b.baseAddress, Int32(b.count))!
            defer { BIO_free(bio) }
            while let cert = PEM_read_bio_X509(bio, nil, nil, nil) {
                parsed += 1
                X509_free(cert)
            }
            _ = openSSLError()  // the end of the input leaves an error on the queue
        }
        guard parsed == begun else {
            return "'\(file)' is not a complete PEM CA bundle (\(parsed) of \(begun) certificates parse; half-written?)"
        }
        return nil
    }

    /// The expiry of each client certificate of `credentials` (``CredentialExpiry``, `what: certificate`).
    public static func expiries(_ credentials: [Credential]) -> [CredentialExpiry] {
        credentials.compactMap { c in
            guard let s = c.kind as? ClientCertificateSettings, let notAfter = s.material?.notAfter else { return nil }
            return CredentialExpiry(credential: c.name, what: .certificate, expires: notAfter)
        }
    }

    /// A warning for a client certificate of `c` that expires within `warningDays` of `now` (or has expired), nil
    /// otherwise: for `authproxy check` and the log at start and after a renewal.
    public static func expiryWarning(_ c: Credential, now: Int64, warningDays: Int) -> String? {
        guard let e = expiries([c]).first, e.isDueSoon(now: now, warningDays: warningDays) else { return nil }
        let at = rfc3339(millis: e.expires)
        if e.expires <= now {
            return
                "credential '\(c.name)': its client certificate EXPIRED at \(at); servers refuse it: put a renewed certificate in its files (it is taken without a restart)"
        }
        let days = (e.expires - now) / 86_400_000
        return
            "credential '\(c.name)': its client certificate expires at \(at) (in \(days) days, within expiry_warning_days = \(warningDays)): renew it (the renewed files are taken without a restart)"
    }
}
