import CAuthProxyShims
import Testing

@testable import AuthProxyCore

/// The pieces session resumption rests on: the SNI read from the raw extension before OpenSSL parses it, the name a
/// handshake's certificate (and so its sessions) is bound to, and the ticket keys' rotation.
@Suite struct TLSResumptionTests {
    private func extensionBytes(_ entries: [(UInt8, [UInt8])]) -> [UInt8] {
        var list: [UInt8] = []
        for (type, name) in entries { list += [type, UInt8(name.count >> 8), UInt8(name.count & 0xff)] + name }
        return [UInt8(list.count >> 8), UInt8(list.count & 0xff)] + list
    }

    private func hostName(_ bytes: [UInt8]) -> String? { bytes.withUnsafeBytes { ServerNameExtension.hostName($0) } }

    @Test func serverNameExtension() {
        #expect(hostName(extensionBytes([(0, Array("gis.example.com".utf8))])) == "gis.example.com")
        // The first host_name entry, after an entry of another (unknown) type.
        #expect(hostName(extensionBytes([(7, [1, 2, 3]), (0, Array("a.example".utf8))])) == "a.example")
        // No host_name entry, an empty one, a list length that disagrees, a name running past the end, nothing.
        #expect(hostName(extensionBytes([(7, [1, 2, 3])])) == nil)
        #expect(hostName(extensionBytes([(0, [])])) == nil)
        #expect(hostName([0x00, 0x09] + extensionBytes([(0, Array("a.example".utf8))]).dropFirst(2)) == nil)
        #expect(hostName([0x00, 0x05, 0x00, 0x00, 0x09, 0x61, 0x62]) == nil)
        #expect(hostName([0x00]) == nil)
        #expect(hostName([]) == nil)
    }

    @Test(
        arguments: [
            // A usable SNI names the certificate, lower-cased (so sessions for one host agree whatever the case).
            ("GIS.Example.com", "gis.example.com", "gis.example.com"),
            ("b.localhost", "localhost", "b.localhost"),
            // No SNI (an IP literal, or an old client): the CONNECT host or the listener's address.
            (nil, "127.0.0.1", "127.0.0.1"),
            (nil, "Gis.Example.com", "gis.example.com"),
            // An SNI that is no host name gets the fallback's certificate (which the client then rejects).
            ("bad name", "localhost", "localhost"),
            ("", "localhost", "localhost"),
            ("a%b", "::1", "::1"),
        ] as [(String?, String, String)])
    func certificateName(sni: String?, fallback: String, expected: String) {
        #expect(LeafMinter.certificateName(sni: sni, fallback: fallback) == expected)
    }

    @Test func noCertificateNameWhenNeitherIsUsable() {
        #expect(LeafMinter.certificateName(sni: "bad name", fallback: "also bad") == nil)
        #expect(LeafMinter.certificateName(sni: nil, fallback: String(repeating: "a", count: 254)) == nil)
    }

    /// An hour per key: the key encrypts for one interval and decrypts for two; the previous key's tickets are
    /// renewed; a key two intervals old is gone.
    @Test func ticketKeysRotate() throws {
        let keys = try #require(ap_ticket_keys_new(3600))
        defer { ap_ticket_keys_free(keys) }
        let t0 = 1_000_000
        func encrypting(_ now: Int) -> [UInt8] {
            var name = [UInt8](repeating: 0, count: 16)
            #expect(ap_ticket_keys_encrypting_name(keys, now, &name) == 1)
            return name
        }
        func lookup(_ name: [UInt8], _ now: Int) -> Int32 { ap_ticket_keys_lookup(keys, now, name) }

        let first = encrypting(t0)
        #expect(encrypting(t0 + 3599) == first)
        #expect(lookup(first, t0 + 3599) == 1)
        #expect(lookup([UInt8](repeating: 0, count: 16), t0) == 0)

        let second = encrypting(t0 + 3600)  // an hour on: a new key encrypts
        #expect(second != first)
        #expect(lookup(first, t0 + 3600) == 2)  // the first still decrypts, and its tickets are renewed
        #expect(lookup(second, t0 + 3600) == 1)
        #expect(lookup(first, t0 + 7199) == 2)
        // Two hours after its birth the first key is dropped (the lookup itself rotates: no encryption needed).
        #expect(lookup(first, t0 + 7200) == 0)
        let third = encrypting(t0 + 7200)
        #expect(third != second && third != first)
        #expect(lookup(second, t0 + 7200) == 2)

        // After a long quiet spell nothing old survives: the previous key is more than two intervals old.
        let fourth = encrypting(t0 + 100_000)
        #expect(lookup(third, t0 + 100_000) == 0 && lookup(second, t0 + 100_000) == 0)
        #expect(lookup(fourth, t0 + 100_000) == 1)
    }

    @Test func noKeysWithoutAnInterval() {
        #expect(ap_ticket_keys_new(0) == nil)
    }
}
