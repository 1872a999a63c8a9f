import Testing

@testable import AuthProxyCore

/// The `CURLOPT_RESOLVE` entry that keeps libcurl from looking up a name the Dialer already connected to.
@Suite struct ResolvePinTests {
    @Test func aNameIsPinnedToTheDialedAddress() {
        #expect(
            ResolvePin.entry(host: "gis.example.com", port: 443, address: IPAddress.parse("192.0.2.7")!)
                == "gis.example.com:443:192.0.2.7")
    }

    @Test func anIPv6AddressGoesInBrackets() {
        #expect(
            ResolvePin.entry(host: "parent.corp", port: 3128, address: IPAddress.parse("2001:db8::1")!)
                == "parent.corp:3128:[2001:db8::1]")
    }

    @Test(arguments: ["192.0.2.7", "2001:db8::1", "::1"])
    func anIPLiteralNeedsNoPin(_ host: String) {
        #expect(ResolvePin.entry(host: host, port: 443, address: IPAddress.parse(host)!) == nil)
    }
}
