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

/// The connector's own failures map through the same function, and a tunnel answers them as an exchange does.
@Suite struct ConnectorErrorTests {
    @Test func anAttemptPastItsDeadlineIsATimeout() {
        let e = UpstreamError(
            dial: .timedOut(7), host: "squid.corp", port: 3128, destination: "gis.example.com:443", timeoutSeconds: 7)
        #expect(e.cause == .timeout)
        #expect(e.metricCause == .timeout)
        #expect(e.detail == "Failed to connect to squid.corp port 3128 after 7000 ms")
        #expect(e.response.status == 504)
    }

    @Test func aParentsFailureIsAnsweredAsTheParents() {
        var e = UpstreamError(
            dial: .unreachable(ECONNREFUSED), host: "squid.corp", port: 3128, destination: "gis.example.com:443",
            timeoutSeconds: 30)
        let p = ParentProxy(scheme: .http, host: "squid.corp", port: 3128)
        e.failedAtParents(
            .parent(ParentFailure(parent: p, cause: .connect, connectStatus: 0, credential: nil)), pac: nil)
        #expect(e.response.status == 502)
        #expect(e.response.message.contains("parent proxy http://squid.corp:3128"))
        #expect(e.metricCause == .connect)
    }

    @Test func aConfiguredParentAtADeniedAddressIsNamedWithoutAPacFile() {
        var e = UpstreamError(
            dial: .denied(IPAddress.parse("10.0.0.1")!), host: "10.0.0.1", port: 3128, destination: "h:443",
            timeoutSeconds: 30)
        let p = ParentProxy(scheme: .http, host: "10.0.0.1", port: 3128)
        e.failedAtParents(.deniedParent(p, IPAddress.parse("10.0.0.1")!), pac: nil)
        #expect(e.response.status == 403)
        #expect(e.response.message.hasPrefix("The parent proxy is at a denied address"))
    }

    @Test func aRefusedRouteKeepsThePlannersAnswer() {
        var e = UpstreamError(cause: .other("no route"), detail: "", destination: "h:443", timeoutSeconds: 30)
        e.routeRefusal = ErrorResponse(status: 502, message: "No PAC file loaded from x", details: [], retryAfter: 10)
        #expect(e.response.status == 502)
        #expect(e.response.message == "No PAC file loaded from x")
        #expect(e.metricCause == .other)
    }
}
