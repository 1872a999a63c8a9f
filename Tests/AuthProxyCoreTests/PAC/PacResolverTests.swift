import Dispatch
import Foundation
import Logging
import Testing

@testable import AuthProxyCore

/// The PAC file read from disk and evaluated by the real engine (pacparser), routes given through
/// ``ParentRouting``: no sockets. Serialized: the engine is one per process.
@Suite(.serialized) struct PacResolverTests {
    static let pac = """
        function FindProxyForURL(url, host) {
            if (host == "a.example") return "PROXY pa.corp:3128";
            if (dnsDomainIs(host, ".b.example")) return "PROXY pb.corp:3128; PROXY pc.corp:3128; DIRECT";
            if (shExpMatch(url, "https://s.example:8443/")) return "HTTPS ps.corp:443";
            if (host == "boom.example") throw "no rule for boom";
            return "DIRECT";
        }
        """

    let dir: String = {
        let d = FileManager.default.temporaryDirectory.appendingPathComponent("pac-\(UUID().uuidString)").path
        try? FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true)
        return d
    }()

    func write(_ text: String) -> String {
        let path = dir + "/proxy.pac"
        _ = FileManager.default.createFile(atPath: path, contents: Data(text.utf8))
        return path
    }

    /// The PAC worker is the `authproxy` binary, built next to this test bundle (the engine's default,
    /// /proc/self/exe, is the test runner here).
    static let workerPath: String = {
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? ""
        return URL(fileURLWithPath: exe).deletingLastPathComponent().appendingPathComponent("authproxy").path
    }()

    /// Configures `resolver` on `path` and waits for the read to end.
    func load(_ resolver: PacResolver, _ path: String, evaluationSeconds: Int = 10) {
        PacEngine.shared.queue.sync { PacEngine.shared.workerPath = Self.workerPath }
        let done = DispatchSemaphore(value: 0)
        resolver.configure(
            .file(path), refreshSeconds: 3600, timeoutSeconds: 5, evaluationSeconds: evaluationSeconds,
            logger: Logger(label: "test")
        ) {
            done.signal()
        }
        done.wait()
    }

    func routing(_ resolver: PacResolver, noProxy: [String] = [], deny: [String] = []) -> ParentRouting {
        var u = UpstreamProxyConfig()
        u.pac = .file(dir + "/proxy.pac")
        if case .success(let n) = NoProxyList.parse(noProxy) { u.noProxy = n }
        return ParentRouting(
            config: u, credentials: [], health: ParentHealth(backoffSeconds: 30), pac: resolver,
            deny: deny.compactMap(AddressBlock.parse))
    }

    func route(_ r: ParentRouting, _ scheme: String, _ host: String, _ port: Int) -> ParentRouting.Lookup {
        if r.lookup(scheme: scheme, host: host, port: port) == .pending {
            let done = DispatchSemaphore(value: 0)
            r.evaluate(scheme: scheme, host: host, port: port) { done.signal() }
            done.wait()
        }
        return r.lookup(scheme: scheme, host: host, port: port)
    }

    @Test func destinationsGoWhereThePacFileSays() {
        let resolver = PacResolver()
        load(resolver, write(Self.pac))
        #expect(resolver.snapshot.loaded)
        let r = routing(resolver, noProxy: ["a.example:8080"])
        #expect(r.lookup(scheme: "http", host: "a.example", port: 80) == .pending)
        guard case .ready(let a?) = route(r, "http", "A.Example.", 80) else {
            Issue.record("no route for a.example")
            return
        }
        #expect(a.candidates.map(\.url) == ["http://pa.corp:3128"])
        #expect(!a.fallbackDirect)
        guard case .ready(let b?) = route(r, "https", "x.b.example", 443) else {
            Issue.record("no route for x.b.example")
            return
        }
        #expect(b.candidates.map(\.url) == ["http://pb.corp:3128", "http://pc.corp:3128"])
        #expect(b.fallbackDirect)
        guard case .ready(let s?) = route(r, "https", "s.example", 8443) else {
            Issue.record("no route for s.example:8443")
            return
        }
        #expect(s.candidates.map(\.url) == ["https://ps.corp:443"])
        #expect(route(r, "https", "s.example", 443) == .ready(nil))
        #expect(route(r, "http", "elsewhere.example", 80) == .ready(nil))
        // no_proxy is authproxy's own decision, taken before the PAC file is asked.
        #expect(r.lookup(scheme: "http", host: "a.example", port: 8080) == .ready(nil))
        // A rule that throws: refused with a 502 naming the PAC file, not sent direct.
        guard case .refused(let e) = route(r, "http", "boom.example", 80) else {
            Issue.record("boom.example was routed")
            return
        }
        #expect(e.status == 502)
        #expect(e.message.contains("proxy.pac"))
    }

    /// A blind tunnel's route is the PAC file's answer for `https://host:port/`, planned with the CONNECT: pending
    /// until the file was asked, then planned again.
    @Test func aTunnelIsRoutedByThePacFile() {
        let resolver = PacResolver()
        load(resolver, write(Self.pac))
        let r = routing(resolver, noProxy: ["a.example:8080"])
        func plan(_ host: String, _ port: Int) -> TunnelRoute {
            guard
                case .blind(let route) = RequestPlanner.connect(
                    host: host, port: port, store: CredentialStore([]), connectPorts: [443, 8080, 8443],
                    unmatched: .relay, routing: r, denyDestinations: [])
            else {
                Issue.record("\(host):\(port) is not a blind tunnel")
                return .direct
            }
            return route
        }
        #expect(plan("x.b.example", 443) == .pending(r))
        _ = route(r, "https", "x.b.example", 443)
        guard case .parents(let b) = plan("x.b.example", 443) else {
            Issue.record("no parents for x.b.example")
            return
        }
        #expect(b.candidates.map(\.url) == ["http://pb.corp:3128", "http://pc.corp:3128"])
        #expect(b.fallbackDirect)
        _ = route(r, "https", "s.example", 8443)
        guard case .parents(let s) = plan("s.example", 8443) else {
            Issue.record("no parent for s.example:8443")
            return
        }
        #expect(s.candidates.map(\.url) == ["https://ps.corp:443"])
        _ = route(r, "https", "elsewhere.example", 443)
        #expect(plan("elsewhere.example", 443) == .direct)
        #expect(plan("a.example", 8080) == .direct, "no_proxy comes before the PAC file")
        _ = route(r, "https", "boom.example", 443)
        guard case .refused(let e) = plan("boom.example", 443) else {
            Issue.record("boom.example was routed")
            return
        }
        #expect(e.status == 502)
    }

    @Test func aBrokenPacFileLeavesTheLastGoodOneInForce() {
        let resolver = PacResolver()
        load(resolver, write(Self.pac))
        let r = routing(resolver)
        #expect(route(r, "http", "a.example", 80) != .ready(nil))
        load(resolver, write("function FindProxyForURL(url, host) { return \"PROXY x:1\"; "))
        let s = resolver.snapshot
        #expect(s.loaded)
        #expect(s.lastError != nil)
        #expect(s.failures == 1)
        // The cache was not cleared, and a fresh evaluation still uses the old file.
        guard case .ready(let again?) = route(r, "http", "x.b.example", 80) else {
            Issue.record("the old PAC file is gone")
            return
        }
        #expect(again.candidates.first?.host == "pb.corp")
        // A file without FindProxyForURL is refused too.
        load(resolver, write("var x = 1;"))
        #expect(resolver.snapshot.failures == 2)
        #expect(route(r, "http", "y.b.example", 80) != .ready(nil))
        // A good new file replaces it, and its answers replace the old ones.
        load(resolver, write("function FindProxyForURL(url, host) { return \"PROXY new.corp:1; DIRECT\"; }"))
        #expect(resolver.snapshot.lastError == nil)
        guard case .ready(let fresh?) = route(r, "http", "x.b.example", 80) else {
            Issue.record("the new PAC file is not in force")
            return
        }
        #expect(fresh.candidates.map(\.url) == ["http://new.corp:1"])
    }

    @Test func withoutAnyPacFileRequestsAreRefused() {
        let resolver = PacResolver()
        load(resolver, dir + "/missing.pac")
        let s = resolver.snapshot
        #expect(!s.loaded)
        #expect(s.lastError?.contains("missing.pac") == true)
        let r = routing(resolver)
        guard case .refused(let e) = r.lookup(scheme: "http", host: "a.example", port: 80) else {
            Issue.record("routed without a PAC file")
            return
        }
        #expect(e.status == 502)
        #expect(e.message.contains("No PAC file loaded"))
        #expect(r.routeWaiting(url: "https://a.example/arcgis/tokens") == .failure(e))
        let ready = Readiness.evaluate(listeners: [], shuttingDown: false, prefetch: [], pac: s) { _ in nil }
        #expect(!ready.ready)
        #expect(ready.reasons.first?.contains("no PAC file loaded") == true)
    }

    /// A script that doubles a string until memory runs out is refused at load, naming the limit; the process's
    /// memory never grows with it (the worker's does, up to its cap), and the last good file stays in force.
    @Test func aPacFileThatExhaustsMemoryIsRefusedAndTheLastGoodOneStays() {
        let resolver = PacResolver()
        load(resolver, write(Self.pac))
        let r = routing(resolver)
        load(resolver, write("function FindProxyForURL(u, h) { var s = \"x\"; while (true) s = s + s; }"))
        let s = resolver.snapshot
        #expect(s.loaded)
        #expect(s.lastError?.contains("exceeded the PAC memory limit of \(PacEngine.memoryMiB) MiB") == true)
        guard case .ready(let a?) = route(r, "http", "a.example", 80) else {
            Issue.record("the last good PAC file is gone")
            return
        }
        #expect(a.candidates.map(\.url) == ["http://pa.corp:3128"])
    }

    /// A rule that never ends is killed at the deadline: that destination is refused with a 502 naming the cause,
    /// and the worker, started again with the same file, answers for the next one.
    @Test func anEndlessRuleIsCutAtTheDeadlineAndTheWorkerStartsAgain() {
        let resolver = PacResolver()
        load(
            resolver,
            write(
                """
                function FindProxyForURL(url, host) {
                    if (host == "stuck.example") { while (true) {} }
                    return "PROXY p.corp:3128";
                }
                """), evaluationSeconds: 1)
        let r = routing(resolver)
        let started = DispatchTime.now()
        guard case .refused(let e) = route(r, "http", "stuck.example", 80) else {
            Issue.record("stuck.example was routed")
            return
        }
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9
        #expect(seconds < 8)
        #expect(e.status == 502)
        #expect(e.details.joined().contains("did not answer within 1 s"))
        guard case .ready(let p?) = route(r, "http", "other.example", 80) else {
            Issue.record("the restarted worker gave no route")
            return
        }
        #expect(p.candidates.map(\.url) == ["http://p.corp:3128"])
        #expect(PacEngine.shared.activity == .idle)
    }

    /// A parent the PAC file names at a `deny_destinations` address, literal or by name, is checked where it would
    /// be connected to (``ConnectAttempts``, with `parentDeny`): alone it refuses the request (403 naming the PAC
    /// file and the setting), in a list it is skipped, before a trailing DIRECT the destination is tried.
    @Test func aPacNamedParentAtADeniedAddressIsRefusedOrSkipped() {
        let resolver = PacResolver()
        load(
            resolver,
            write(
                """
                function FindProxyForURL(url, host) {
                    if (host == "meta.example") return "PROXY 169.254.169.254:80";
                    if (host == "list.example") return "PROXY 169.254.169.254:80; PROXY p.corp:3128";
                    if (host == "direct.example") return "PROXY 169.254.169.254:80; DIRECT";
                    return "PROXY p.corp:3128";
                }
                """))
        let r = routing(resolver, deny: ["169.254.0.0/16"])
        let metadata = IPAddress.parse("169.254.169.254")!
        let denied = ParentProxy.parse("http://169.254.169.254:80")!
        guard case .ready(let m?) = route(r, "http", "meta.example", 80) else {
            Issue.record("no route for meta.example")
            return
        }
        #expect(m.fromPac && m.parentDeny == r.deny)
        var attempts = ConnectAttempts(route: m)
        guard case .fail(let f) = attempts.failed(.denied(metadata)) else {
            Issue.record("a denied parent alone let the request go on")
            return
        }
        #expect(f == .deniedParent(denied, metadata))
        var error = UpstreamError(
            dial: .denied(metadata), host: denied.host, port: denied.port, destination: "meta.example:80",
            timeoutSeconds: 30)
        error.failedAtParents(f, pac: r.config.pac?.description)
        #expect(error.response.status == 403)
        #expect(error.response.message.contains("proxy.pac") && error.response.message.contains("denied address"))
        #expect(error.response.details.joined().contains("169.254.169.254:80"))
        #expect(error.response.details.joined().contains("deny_destinations"))
        guard case .ready(let l?) = route(r, "http", "list.example", 80) else {
            Issue.record("no route for list.example")
            return
        }
        var listed = ConnectAttempts(route: l)
        #expect(listed.failed(.denied(metadata)) == .attempt(.parent(ParentProxy.parse("http://p.corp:3128")!)))
        guard case .ready(let d?) = route(r, "http", "direct.example", 80) else {
            Issue.record("no route for direct.example")
            return
        }
        var direct = ConnectAttempts(route: d)
        #expect(direct.failed(.denied(metadata)) == .attempt(.direct))
        // The configured parents are the operator's choice: no check on them.
        var u = UpstreamProxyConfig()
        u.parents = [ParentProxy.parse("http://p.corp:3128")!]
        let configured = ParentRouting(
            config: u, credentials: [], health: ParentHealth(backoffSeconds: 30), deny: r.deny)
        guard case .ready(let c?) = configured.lookup(scheme: "http", host: "a.example", port: 80) else {
            Issue.record("no configured route")
            return
        }
        #expect(c.parentDeny.isEmpty)
    }
}
