import Foundation
import Testing

@testable import AuthProxyCore

/// Certificate files renewed on disk: what is loaded and checked (``ClientCertificateCheck``), which changes are
/// noticed (``CertificateFiles``), what is adopted or refused (``CertificateRenewal``), and the expiry warnings.
/// Certificates are made with the proxy's own CA code (a self-signed certificate and its key make a PEM pair).
@Suite struct CertificateRenewalTests {
    struct Dir {
        let path: String
        init() throws {
            path = NSTemporaryDirectory() + "authproxy-cert-renewal-" + UUID().uuidString
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        }
        func write(_ name: String, _ text: String) throws {
            // Atomically, as a renewal tool does (a new file renamed over the old one).
            try text.write(toFile: path + "/" + name, atomically: true, encoding: .utf8)
        }
        func file(_ name: String) -> String { path + "/" + name }
        func remove() { try? FileManager.default.removeItem(atPath: path) }
    }

    static func pair(_ cn: String) throws -> CertificateAuthority {
        ProxyServer.initializeLibraries()
        return try CertificateAuthority.create(commonName: cn, permitted: nil)
    }

    static func config(_ dir: Dir, extra: String = "") throws -> [Credential] {
        try ConfigLoader(environment: [:]).parse(
            """
            [proxy]
            listen = ["127.0.0.1:3128"]

            [[credential]]
            name = "pki"
            type = "certificate"
            cert = "\(dir.file("tls.crt"))"
            key = "\(dir.file("tls.key"))"
            match = "https://pki.example.com"
            \(extra)
            """
        ).credentials
    }

    static func material(_ c: Credential) -> ClientCertificateMaterial? {
        if let s = c.kind as? ClientCertificateSettings { return s.material }
        return nil
    }

    @Test func theLoaderKeepsTheBytesItCheckedWithTheirExpiry() throws {
        let dir = try Dir()
        defer { dir.remove() }
        let a = try Self.pair("client A")
        try dir.write("tls.crt", a.certificatePEM)
        try dir.write("tls.key", a.keyPEM)
        let m = try #require(Self.material(try Self.config(dir)[0]))
        #expect(m.cert == Array(a.certificatePEM.utf8))
        #expect(m.key == Array(a.keyPEM.utf8))
        #expect(m.notAfter == a.notAfterMillis)
        // The running files' digests come from those bytes: nothing counts as changed until a file does.
        let running = CertificateFiles(running: try Self.config(dir))
        #expect(running.paths == [dir.file("tls.crt"), dir.file("tls.key")])
        #expect(running.changed(comparedTo: running.rereadFromDisk()).isEmpty)
    }

    @Test func aRenewedPairIsAdoptedAndAHalfDoneOneIsNot() throws {
        let dir = try Dir()
        defer { dir.remove() }
        let a = try Self.pair("client A")
        let b = try Self.pair("client B")
        try dir.write("tls.crt", a.certificatePEM)
        try dir.write("tls.key", a.keyPEM)
        let credentials = try Self.config(dir)
        let before = CertificateFiles(running: credentials)

        // The certificate renewed before its key: refused, naming the key file; the old pair stays.
        try dir.write("tls.crt", b.certificatePEM)
        var changed = before.changed(comparedTo: before.rereadFromDisk())
        #expect(changed == [dir.file("tls.crt")])
        var outcome = CertificateRenewal.renew(credentials, changed: changed)
        #expect(outcome.credentials == nil)
        guard case .refused("pki", let file, let cause)? = outcome.events.first else {
            Issue.record("a certificate without its key must be refused: \(outcome.events)")
            return
        }
        #expect(file == dir.file("tls.key"))
        #expect(cause.contains("does not belong"))

        // A half-written certificate: refused, naming the certificate file.
        let pem = b.certificatePEM
        try dir.write("tls.crt", String(pem.prefix(pem.count / 2)))
        outcome = CertificateRenewal.renew(credentials, changed: [dir.file("tls.crt")])
        #expect(outcome.credentials == nil)
        #expect(
            outcome.events == [
                .refused(
                    credential: "pki", file: dir.file("tls.crt"),
                    cause: "'\(dir.file("tls.crt"))' is not a PEM certificate")
            ])

        // The key follows: the new pair is adopted, with its own expiry and a digest that keeps connections apart.
        try dir.write("tls.crt", b.certificatePEM)
        try dir.write("tls.key", b.keyPEM)
        changed = before.changed(comparedTo: before.rereadFromDisk())
        #expect(changed == [dir.file("tls.crt"), dir.file("tls.key")])
        outcome = CertificateRenewal.renew(credentials, changed: changed)
        #expect(outcome.events == [.certificateRenewed(credential: "pki", notAfter: b.notAfterMillis)])
        let renewed = try #require(outcome.credentials)
        let m = try #require(Self.material(renewed[0]))
        #expect(m.cert == Array(b.certificatePEM.utf8))
        #expect(m != Self.material(credentials[0]))
        // Written again with the same contents: nothing to adopt.
        outcome = CertificateRenewal.renew(renewed, changed: changed)
        #expect(outcome.credentials == nil && outcome.events.isEmpty)
    }

    @Test func aWrongKeyPasswordIsRefused() throws {
        let dir = try Dir()
        defer { dir.remove() }
        let a = try Self.pair("client A")
        try dir.write("tls.crt", a.certificatePEM)
        try dir.write("tls.key", a.keyPEM)
        let credentials = try Self.config(dir)
        var s = ClientCertificateSettings(cert: dir.file("tls.crt"), key: dir.file("tls.key"), keyPassword: "nope")
        s.material = Self.material(credentials[0])
        // An unencrypted key with a password set still reads; a key that is not PEM does not.
        try dir.write("tls.key", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
        guard case .failure(let p) = ClientCertificateCheck.load(s) else {
            Issue.record("a damaged key must be refused")
            return
        }
        #expect(p.file == dir.file("tls.key"))
        #expect(p.message.contains("wrong key_password or not a PEM key"))
    }

    @Test func aCABundleIsAdoptedOnlyWhenEveryCertificateParses() throws {
        let dir = try Dir()
        defer { dir.remove() }
        let a = try Self.pair("CA A")
        let b = try Self.pair("CA B")
        try dir.write("tls.crt", a.certificatePEM)
        try dir.write("tls.key", a.keyPEM)
        try dir.write("ca.pem", a.certificatePEM)
        let credentials = try Self.config(
            dir,
            extra: """

                [[credential]]
                name = "trust"
                type = "server-trust"
                ca_file = "\(dir.file("ca.pem"))"
                match = "https://pki.example.com"
                """)
        let bundle = a.certificatePEM + b.certificatePEM
        try dir.write("ca.pem", String(bundle.prefix(bundle.count - 200)))
        var outcome = CertificateRenewal.renew(credentials, changed: [dir.file("ca.pem")])
        #expect(outcome.credentials == nil)
        guard case .refused("trust", _, let cause)? = outcome.events.first else {
            Issue.record("a cut-short bundle must be refused: \(outcome.events)")
            return
        }
        #expect(cause.contains("1 of 2 certificates parse"))
        try dir.write("ca.pem", bundle)
        outcome = CertificateRenewal.renew(credentials, changed: [dir.file("ca.pem")])
        #expect(outcome.events == [.caRenewed(credential: "trust", file: dir.file("ca.pem"))])
        guard let t = outcome.credentials?[1].kind as? ServerTrustSettings else {
            Issue.record("the renewed bundle should be in force")
            return
        }
        #expect(t.caBundle == Array(bundle.utf8))
        guard let old = credentials[1].kind as? ServerTrustSettings else { return }
        #expect(t.caDigest != old.caDigest)
        #expect(CertificateRenewal.caBundleProblem(Array("not a bundle".utf8), file: "x") != nil)
    }

    @Test func expiryIsReportedAndWarnedWithinTheWarningDays() throws {
        var c = Credential(
            name: "pki", kind: .certificate(ClientCertificateSettings()), match: [], placement: .param,
            overrideClientToken: false, line: 1)
        let day: Int64 = 86_400_000
        let now: Int64 = 1_800_000_000_000
        func expiring(_ at: Int64) {
            var s = ClientCertificateSettings(cert: "c", key: "k")
            s.material = ClientCertificateMaterial(cert: [1], key: [2], notAfter: at)
            c.kind = .certificate(s)
        }
        expiring(now + 30 * day)
        #expect(
            CertificateRenewal.expiries([c]) == [
                CredentialExpiry(credential: "pki", what: .certificate, expires: now + 30 * day)
            ])
        #expect(CertificateRenewal.expiryWarning(c, now: now, warningDays: 14) == nil)
        expiring(now + 10 * day)
        let soon = try #require(CertificateRenewal.expiryWarning(c, now: now, warningDays: 14))
        #expect(soon.contains("expires at") && soon.contains("in 10 days"))
        expiring(now - day)
        let expired = try #require(CertificateRenewal.expiryWarning(c, now: now, warningDays: 14))
        #expect(expired.contains("EXPIRED"))
    }
}
