import Testing

@testable import AuthProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// The framing between the proxy and its PAC worker, and the engine's pure decisions: no process.
struct PacWorkerProtocolTests {
    @Test(arguments: [
        PacWorkerProtocol.Request.load("function FindProxyForURL(u, h) { return \"DIRECT\"; }"),
        .load(""),
        .findProxy(url: "https://[::1]:8443/", host: "::1"),
        .findProxy(url: "http://ünïcode.example/", host: "ünïcode.example"),
    ])
    func requestsSurviveTheRoundTrip(_ r: PacWorkerProtocol.Request) throws {
        var reader = PacWorkerProtocol.FrameReader()
        reader.append(PacWorkerProtocol.encode(r))
        let body = try #require(try reader.next()?.get())
        #expect(PacWorkerProtocol.decodeRequest(body) == .success(r))
        #expect(reader.next() == nil)
    }

    @Test(arguments: [
        PacWorkerProtocol.Reply.loaded, .answer("PROXY a:1; DIRECT"), .scriptError("boom"),
        .outOfMemory("out of memory"),
    ])
    func repliesSurviveTheRoundTripByteByByte(_ r: PacWorkerProtocol.Reply) throws {
        var reader = PacWorkerProtocol.FrameReader()
        let bytes = PacWorkerProtocol.encode(r) + PacWorkerProtocol.encode(.answer("next"))
        var got: [PacWorkerProtocol.Reply] = []
        for b in bytes {
            reader.append([b])
            if let body = try reader.next()?.get() { got.append(try PacWorkerProtocol.decodeReply(body).get()) }
        }
        #expect(got == [r, .answer("next")])
    }

    @Test func anOversizedFrameIsAnErrorBeforeItsBytesArrive() {
        var reader = PacWorkerProtocol.FrameReader()
        let n = PacWorkerProtocol.maxFrameBytes + 1
        reader.append([UInt8(n >> 24), UInt8((n >> 16) & 0xff), UInt8((n >> 8) & 0xff), UInt8(n & 0xff)])
        guard case .failure? = reader.next() else {
            Issue.record("an oversized frame was accepted")
            return
        }
    }

    @Test(arguments: [
        [UInt8](), [UInt8(ascii: "F"), 0, 0, 0, 9, 0x61], [UInt8(ascii: "L")], [UInt8(ascii: "Z"), 0, 0, 0, 0],
        [UInt8(ascii: "F"), 0, 0, 0, 1, 0x61],
    ])
    func malformedBodiesAreRefused(_ body: [UInt8]) {
        guard case .failure = PacWorkerProtocol.decodeRequest(body) else {
            Issue.record("\(body) decoded")
            return
        }
    }

    @Test func failuresNameTheMemoryLimitAndTheDeadline() {
        #expect(PacEngine.failure(.answer("DIRECT")) == nil)
        #expect(PacEngine.failure(.scriptError("x is not defined"))?.message == "x is not defined")
        let oom = PacEngine.failure(.outOfMemory("out of memory"))?.message ?? ""
        #expect(oom.contains("exceeded the PAC memory limit of \(PacEngine.memoryMiB) MiB"))
        // Killed by SIGXCPU (its CPU limit), by SIGKILL (the OOM killer), exited with status 1.
        #expect(PacEngine.death(status: SIGXCPU, deadlineSeconds: 3).contains("did not answer within 3 s"))
        #expect(PacEngine.death(status: SIGKILL, deadlineSeconds: 3) == "the PAC worker died (signal 9)")
        #expect(PacEngine.death(status: 1 << 8, deadlineSeconds: 3) == "the PAC worker exited (status 1)")
    }

    @Test func routingIsStuckWhileAnEvaluationRunsASecondOrTheEngineRestarts() {
        #expect(PacEngineActivity.idle.stall(now: 10_000) == nil)
        let e = PacEngineActivity.evaluating(what: "http://a.example/", since: 10_000)
        #expect(e.stall(now: 10_999) == nil)
        #expect(e.stall(now: 12_000)?.contains("http://a.example/") == true)
        // A clock read before `since` (another thread's): not stuck.
        #expect(e.stall(now: 9_000) == nil)
        #expect(PacEngineActivity.restarting(why: "killed").stall(now: 0)?.contains("restarting") == true)
        var status = PacResolver.Status(source: "/etc/p.pac", loaded: true)
        #expect(Readiness.evaluate(listeners: [], shuttingDown: false, prefetch: [], pac: status) { _ in nil }.ready)
        status.stall = e.stall(now: 12_000)
        let r = Readiness.evaluate(listeners: [], shuttingDown: false, prefetch: [], pac: status) { _ in nil }
        #expect(!r.ready)
        #expect(r.reasons == [status.stall])
    }
}
