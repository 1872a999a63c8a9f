import Testing

@testable import AuthProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// Running out of file descriptors: the rate-limited count, and the answer a client gets.
@Suite struct DescriptorExhaustionTests {
    static let s: UInt64 = 1_000_000_000

    @Test func failuresAreCountedAndReportedOncePerInterval() {
        let d = DescriptorExhaustion()
        #expect(d.record(now: 10 * Self.s) == 0)  // the first one is logged at once
        #expect(d.record(now: 11 * Self.s) == nil)
        #expect(d.record(now: 14 * Self.s) == nil)
        #expect(d.record(now: 15 * Self.s) == 2)  // 5 s later, with the two held back
        #expect(d.record(now: 15 * Self.s + 1) == nil)
        #expect(d.events == 5)
    }

    @Test func onlyEMFILEAndENFILEAreExhaustion() {
        #expect(DescriptorExhaustion.isExhaustion(EMFILE))
        #expect(DescriptorExhaustion.isExhaustion(ENFILE))
        #expect(!DescriptorExhaustion.isExhaustion(ECONNREFUSED))
        #expect(!DescriptorExhaustion.isExhaustion(ENOMEM))
        #expect(!DescriptorExhaustion.processIsOut())
    }

    /// A socket the proxy could not open is its own temporary failure (503, Retry-After), never "connection
    /// refused or unreachable" (502) about a healthy upstream.
    @Test(arguments: [UpstreamFailure.connect, .timeout, .dns])
    func anUpstreamSocketThatCouldNotBeOpenedIs503(_ cause: UpstreamFailure) {
        var e = UpstreamError(cause: cause, detail: "", destination: "gis.example.com:443", timeoutSeconds: 60)
        #expect(e.response.status != 503)
        e.outOfDescriptors = EMFILE
        let r = e.response
        #expect(r.status == 503)
        #expect(r.retryAfter == 1)
        #expect(r.message.contains("out of file descriptors"))
        #expect(r.message.contains("gis.example.com:443"))
        #expect(r.jsonBody.hasPrefix("{\"error\":{\"code\":503,"))
    }
}
