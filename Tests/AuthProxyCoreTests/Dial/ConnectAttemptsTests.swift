import Dispatch
import Testing

@testable import AuthProxyCore

private let a = ParentProxy(scheme: .http, host: "a.corp", port: 3128)
private let b = ParentProxy(scheme: .http, host: "b.corp", port: 3128)
private let c = ParentProxy(scheme: .https, host: "c.corp", port: 443)
private let metadata = IPAddress.parse("169.254.169.254")!

private func failure(_ p: ParentProxy, _ cause: ParentFailover.Cause, status: Int = 0) -> ParentFailure {
    ParentFailure(parent: p, cause: cause, connectStatus: status, credential: "corp")
}

/// A clock the test moves (ms), for ``ParentHealth``.
private final class TestClock: @unchecked Sendable {
    private let lock = Lock()
    private var ms: UInt64 = 1_000_000
    var now: UInt64 { lock.withLock { ms } }
    func advance(seconds: UInt64) { lock.withLock { ms += seconds * 1000 } }
}

/// The attempt order and failover of one connection (``ConnectAttempts``), without sockets: what the ``Connector``
/// and ``CurlTransfer`` carry out.
@Suite struct ConnectAttemptsTests {
    /// One row: the parents (in order), whether the route ends in DIRECT, the outcomes in turn, and the steps
    /// expected after each.
    struct Row: CustomStringConvertible {
        let name: String
        let parents: [ParentProxy]
        var fallbackDirect = false
        let outcomes: [ConnectAttempts.Outcome]
        let steps: [ConnectAttempts.Step]
        var description: String { name }
    }

    static let rows: [Row] = [
        Row(
            name: "parents in order, every one unreachable", parents: [a, b, c],
            outcomes: [.failed(.connect, status: 0), .failed(.timeout, status: 0), .failed(.connect, status: 0)],
            steps: [.attempt(.parent(b)), .attempt(.parent(c)), .fail(.parent(failure(c, .connect)))]),
        Row(
            name: "a refused login moves on; the last failure is the answer", parents: [a, b],
            outcomes: [.failed(.auth, status: 407), .failed(.timeout, status: 0)],
            steps: [.attempt(.parent(b)), .fail(.parent(failure(b, .timeout)))]),
        Row(
            name: "a refused CONNECT is about the destination: no other parent", parents: [a, b],
            fallbackDirect: true, outcomes: [.failed(.refused, status: 403)],
            steps: [.fail(.parent(failure(a, .refused, status: 403)))]),
        Row(
            name: "PAC: PROXY a; PROXY b; DIRECT", parents: [a, b], fallbackDirect: true,
            outcomes: [.failed(.connect, status: 0), .failed(.auth, status: 407)],
            steps: [.attempt(.parent(b)), .attempt(.direct)]),
        Row(
            name: "PAC: a denied parent is skipped", parents: [a, b],
            outcomes: [.denied(metadata), .failed(.connect, status: 0)],
            steps: [.attempt(.parent(b)), .fail(.parent(failure(b, .connect)))]),
        Row(
            name: "PAC: only denied parents: the answer names the policy", parents: [a, b],
            outcomes: [.denied(metadata), .denied(metadata)],
            steps: [.attempt(.parent(b)), .fail(.deniedParent(b, metadata))]),
        Row(
            name: "PAC: a contacted parent's failure outranks a later denied one", parents: [a, b],
            outcomes: [.failed(.timeout, status: 0), .denied(metadata)],
            steps: [.attempt(.parent(b)), .fail(.parent(failure(a, .timeout)))]),
        Row(
            name: "PAC: a denied parent, then DIRECT", parents: [a], fallbackDirect: true,
            outcomes: [.denied(metadata)], steps: [.attempt(.direct)]),
    ]

    @Test(arguments: rows)
    func theTable(_ row: Row) {
        var attempts = ConnectAttempts(parents: row.parents, fallbackDirect: row.fallbackDirect, credential: "corp")
        #expect(attempts.current == .parent(row.parents[0]))
        for (outcome, expected) in zip(row.outcomes, row.steps) {
            let step = attempts.failed(outcome)
            #expect(step == expected, "\(row.name): after \(outcome)")
            if case .attempt(let next) = step { #expect(attempts.current == next) }
        }
    }

    @Test func withoutParentsTheDestinationIsTheOneAttempt() {
        let attempts = ConnectAttempts(route: nil)
        #expect(attempts.current == .direct)
        #expect(attempts.parent == nil)
    }

    @Test func aRequestThatCannotMoveStaysWithTheParentsFailure() {
        var attempts = ConnectAttempts(parents: [a, b], fallbackDirect: true, credential: "corp")
        #expect(
            attempts.failed(.failed(.connect, status: 0)) { false } == .fail(.parent(failure(a, .connect, status: 0))))
        #expect(attempts.current == .parent(a))
    }

    @Test func whetherItCanMoveIsAskedOnlyWhenAMoveIsPossible() {
        var asked = 0
        var attempts = ConnectAttempts(parents: [a, b])
        _ = attempts.failed(.failed(.refused, status: 502)) {
            asked += 1
            return true
        }
        #expect(asked == 0)
        _ = attempts.failed(.failed(.connect, status: 0)) {
            asked += 1
            return true
        }
        #expect(asked == 1)
        #expect(attempts.current == .parent(b))
    }

    /// A parent that failed is tried last while in backoff, then first again: the order each new connection's
    /// attempts start from (``ParentHealth``, as the ``Connector`` records it).
    @Test func aParentThatFailsThenRecovers() {
        let clock = TestClock()
        let health = ParentHealth(backoffSeconds: 30, now: { clock.now })
        var u = UpstreamProxyConfig()
        u.parents = [a, b]
        let routing = ParentRouting(config: u, credentials: [], health: health)
        let route = ParentRoute(candidates: [a, b], routing: routing)

        var first = ConnectAttempts(route: route)
        #expect(first.current == .parent(a))
        health.failed(a, cause: .connect)
        #expect(first.failed(.failed(.connect, status: 0)) == .attempt(.parent(b)))

        #expect(ConnectAttempts(route: route).current == .parent(b))
        clock.advance(seconds: 31)
        #expect(ConnectAttempts(route: route).current == .parent(a))

        // A refused CONNECT is no fault of the parent's: no backoff.
        health.failed(a, cause: .refused)
        #expect(ConnectAttempts(route: route).current == .parent(a))
        // A failure, then a success: the backoff ends at once.
        health.failed(a, cause: .timeout)
        #expect(ConnectAttempts(route: route).current == .parent(b))
        health.succeeded(a)
        #expect(ConnectAttempts(route: route).current == .parent(a))
    }

    /// Every parent of a PAC answer at a denied address: the client is told which, and why, naming the setting.
    @Test func deniedPacParentsAnswer403NamingTheSetting() throws {
        var attempts = ConnectAttempts(parents: [a])
        guard case .fail(let f) = attempts.failed(.denied(metadata)) else {
            Issue.record("a denied parent was tried")
            return
        }
        var error = UpstreamError(
            dial: .denied(metadata), host: a.host, port: a.port, destination: "gis.example.com:443", timeoutSeconds: 30)
        error.failedAtParents(f, pac: "http://wpad/proxy.pac")
        let r = error.response
        #expect(r.status == 403)
        #expect(r.message.contains("http://wpad/proxy.pac") && r.message.contains("denied address"))
        #expect(r.message.contains("gis.example.com:443"))
        #expect(r.details.joined().contains("a.corp:3128") && r.details.joined().contains("169.254.169.254"))
        #expect(r.details.joined().contains("deny_destinations"))
        #expect(error.metricCause == .connect)
    }
}
