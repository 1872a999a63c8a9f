import Testing

@testable import AuthProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// A Dialer failure is the same answer and metric whether the own client's plain connection or the socket handed
/// to libcurl (https, a parent) was being dialed.
@Suite struct DialErrorTests {
    private func error(_ f: DialFailure) -> UpstreamError {
        UpstreamError(
            dial: f, host: "gis.example.com", port: 443, destination: "gis.example.com:443", timeoutSeconds: 30)
    }

    @Test func aDeniedAddressIsA403NamingIt() {
        let e = error(.denied(IPAddress.parse("10.1.2.3")!))
        #expect(e.cause == .connect)
        #expect(e.deniedAddress == IPAddress.parse("10.1.2.3"))
        #expect(e.response.status == 403)
        #expect(e.response.details.joined().contains("10.1.2.3"))
    }

    @Test func aNameThatDoesNotResolveIsADNSFailure() {
        let e = error(.unresolved("Name or service not known"))
        #expect(e.cause == .dns)
        #expect(e.metricCause == .dns)
        #expect(e.detail == "Could not resolve host: gis.example.com (Name or service not known)")
        #expect(e.response.status == 502)
    }

    @Test func anUnreachableHostIsAConnectFailure() {
        let e = error(.unreachable(ECONNREFUSED))
        #expect(e.cause == .connect)
        #expect(e.metricCause == .connect)
        #expect(e.detail.hasPrefix("Failed to connect to gis.example.com port 443: "))
        #expect(e.deniedAddress == nil)
        #expect(e.response.status == 502)
    }

    @Test func runningOutOfDescriptorsIsTheProxysOwn() {
        let e = error(.outOfDescriptors(EMFILE))
        #expect(e.outOfDescriptors == EMFILE)
        #expect(e.metricCause == .descriptors)
        #expect(e.response.status == 503)
    }
}
