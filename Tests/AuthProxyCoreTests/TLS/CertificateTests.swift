import COpenSSL
import Logging
import Testing

@testable import AuthProxyCore

@Suite struct CertificateTests {
    @Test func nameConstraintsCoverDNSAndIP() {
        let c = CertificateAuthority.nameConstraints(["gis.example.com", "*.example.org", "10.1.2.3"])
        #expect(c.hasPrefix("critical,"))
        #expect(c.contains("permitted;DNS:gis.example.com"))
        #expect(c.contains("permitted;DNS:example.org"))
        #expect(c.contains("permitted;IP:10.1.2.3/255.255.255.255"))
        #expect(!c.contains("IP:0.0.0.0/"))  // an IPv4 host is permitted, so IPv4 is not closed off
        #expect(c.contains("permitted;IP:::/ffff"))  // no IPv6 host: IPv6 closed off
        let dnsOnly = CertificateAuthority.nameConstraints(["gis.example.com"])
        #expect(dnsOnly.contains("permitted;IP:0.0.0.0/255.255.255.255"))
        #expect(!dnsOnly.contains("DNS:invalid"))
        // Only IP literals: DNS names would be unconstrained without a subtree of their own.
        let ipOnly = CertificateAuthority.nameConstraints(["127.0.0.1"])
        #expect(ipOnly.contains("permitted;DNS:invalid"))
        #expect(ipOnly.contains("permitted;IP:127.0.0.1/255.255.255.255"))
    }

    @Test func leavesForIPAddressesCarryNoCommonName() throws {
        ProxyServer.initializeLibraries()
        let ca = try CertificateAuthority.create(commonName: "test CA", permitted: ["127.0.0.1"])
        let minter = try LeafMinter(ca: ca, logger: Logger(label: "test"))
        let leaf = try #require(minter.leaf(for: "127.0.0.1"))
        defer { X509_free(leaf) }
        #expect(X509_NAME_get_index_by_NID(X509_get_subject_name(leaf), NID_commonName, -1) == -1)
        let named = try #require(minter.leaf(for: "gis.example.com"))
        defer { X509_free(named) }
        #expect(X509_NAME_get_index_by_NID(X509_get_subject_name(named), NID_commonName, -1) >= 0)
    }

    @Test func mintedLeafIsSignedByTheCAAndCached() throws {
        ProxyServer.initializeLibraries()
        let ca = try CertificateAuthority.create(commonName: "test CA", permitted: nil)
        let minter = try LeafMinter(ca: ca, logger: Logger(label: "test"))
        let leaf = try #require(minter.leaf(for: "GIS.Example.com"))
        defer { X509_free(leaf) }
        #expect(X509_verify(leaf, X509_get0_pubkey(ca.cert)) == 1)
        #expect(X509_check_host(leaf, "gis.example.com", 0, 0, nil) == 1)
        #expect(X509_check_host(leaf, "other.example.com", 0, 0, nil) != 1)
        let again = try #require(minter.leaf(for: "gis.example.com"))
        X509_free(again)
        #expect(minter.mintedCount == 1)
        let ip = try #require(minter.leaf(for: "127.0.0.1"))
        defer { X509_free(ip) }
        #expect(X509_check_ip_asc(ip, "127.0.0.1", 0) == 1)
        #expect(minter.mintedCount == 2)
        #expect(ca.certificatePEM.hasPrefix("-----BEGIN CERTIFICATE-----"))
    }
}
