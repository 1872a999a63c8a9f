import Testing

@testable import AuthProxyCore

/// The pure decisions of the proxy over TLS: whether a connection's first bytes are a TLS ClientHello, and where
/// the listener's certificate comes from.
@Suite struct ProxyTLSTests {
    private func isTLS(_ bytes: [UInt8]) -> Bool { bytes.withUnsafeBytes { ClientHelloPrefix.isTLS($0) } }

    @Test(
        arguments: [
            // TLS 1.0 record version (what OpenSSL and most clients put on a ClientHello), 1.2, 1.3's legacy 1.0/1.2.
            ([0x16, 0x03, 0x01, 0x02, 0x00], true),
            ([0x16, 0x03, 0x03, 0x00, 0x50], true),
            ([0x16, 0x03, 0x00], true),
            // A first read of one or two bytes is taken as TLS (no HTTP request starts with byte 22).
            ([0x16], true),
            ([0x16, 0x03], true),
            // Byte 22 without a 3.x version, or an impossible minor version: not TLS (the HTTP parser answers 400).
            ([0x16, 0x02, 0x01], false),
            ([0x16, 0x03, 0x05], false),
            // Another TLS record type (an alert) or SSLv2's two-byte header: not a ClientHello.
            ([0x15, 0x03, 0x01], false),
            ([0x80, 0x2e, 0x01], false),
            // HTTP requests, in any form the listener takes.
            (Array("GET http://gis.example/ HTTP/1.1\r\n".utf8), false),
            (Array("CONNECT gis.example:443 HTTP/1.1\r\n".utf8), false),
            (Array("GET /proxy?https://x/ HTTP/1.1\r\n".utf8), false),
            ([], false),
        ] as [([UInt8], Bool)])
    func clientHelloPrefix(bytes: [UInt8], expected: Bool) {
        #expect(isTLS(bytes) == expected)
    }

    @Test func certificateSource() throws {
        let loader = ConfigLoader(environment: [:])
        let ca = "[tls]\nca_cert = \"ca.pem\"\nca_key = \"ca.key\"\n"
        let files = "[proxy]\ntls_cert = \"proxy.pem\"\ntls_key = \"proxy.key\"\n"
        let table: [(String, ProxyTLSSource)] = [
            ("", .none),
            // The interception CA mints when no files are given.
            (ca, .interceptionCA(cert: "ca.pem")),
            // ... but not when it is configured not to intercept (no CA is loaded then).
            (ca + "intercept = \"none\"\n", .none),
            // Files win over the CA.
            (files + ca, .files(cert: "proxy.pem", key: "proxy.key")),
            (files, .files(cert: "proxy.pem", key: "proxy.key")),
        ]
        for (text, expected) in table {
            #expect(ProxyTLSSource.choose(try loader.parse(text)) == expected, "\(text)")
        }
        #expect(ProxyTLSSource.none.summary.contains("tls_cert"))
        #expect(ProxyTLSSource.none.summary.contains("[tls]"))
    }

    @Test func certificateAndKeyGoTogether() {
        let loader = ConfigLoader(environment: [:])
        expectRejected(
            loader, "[proxy]\ntls_cert = \"proxy.pem\"\n", key: "proxy.tls_key", line: 2, fragment: "go together")
        expectRejected(
            loader, "[proxy]\n\ntls_key = \"proxy.key\"\n", key: "proxy.tls_cert", line: 3, fragment: "go together")
    }

    @Test func aChangedCertificateSettingAppliesLive() throws {
        let loader = ConfigLoader(environment: [:])
        let d = ConfigDiff(
            running: try loader.parse(""),
            loaded: try loader.parse("[proxy]\ntls_cert = \"proxy.pem\"\ntls_key = \"proxy.key\"\n"))
        #expect(d.live == ["proxy.tls_cert"])
        #expect(d.restartNeeded.isEmpty)
    }
}
