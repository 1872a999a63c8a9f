import Testing

@testable import AuthProxyCore

/// Which client carries a forwarded request: decided with the plan, read by the executor.
@Suite struct UpstreamClientTests {
    struct Row: CustomStringConvertible {
        let configured: HTTPClientChoice
        let credential: Bool
        let throughParent: Bool
        let scheme: String
        let upgrade: Bool
        let expected: UpstreamClient
        var description: String { "\(configured) cred=\(credential) parent=\(throughParent) \(scheme) ws=\(upgrade)" }
    }

    static let rows: [Row] = [
        Row(
            configured: .native, credential: false, throughParent: false, scheme: "http", upgrade: false, expected: .own
        ),
        Row(
            configured: .native, credential: false, throughParent: false, scheme: "https", upgrade: false,
            expected: .own),
        Row(
            configured: .libcurl, credential: false, throughParent: false, scheme: "https", upgrade: false,
            expected: .libcurl),
        // A network login is answered by libcurl (NTLM and Negotiate bind to its connection).
        Row(
            configured: .native, credential: true, throughParent: false, scheme: "https", upgrade: false,
            expected: .libcurl),
        // Plain http through a parent goes in absolute form, as libcurl writes it; https inside CONNECT.
        Row(
            configured: .native, credential: false, throughParent: true, scheme: "http", upgrade: false,
            expected: .libcurl),
        Row(
            configured: .native, credential: false, throughParent: true, scheme: "https", upgrade: false, expected: .own
        ),
        // A WebSocket goes over the own client, which hands its connection over after the 101.
        Row(
            configured: .libcurl, credential: false, throughParent: true, scheme: "http", upgrade: true, expected: .own),
        // ... unless a network credential needs libcurl (the planner refuses that WebSocket before it goes).
        Row(
            configured: .native, credential: true, throughParent: false, scheme: "https", upgrade: true,
            expected: .libcurl),
    ]

    @Test(arguments: rows)
    func theChoice(_ row: Row) {
        var network = NetworkAuth()
        if row.credential {
            network.password = PasswordSettings(
                username: "u", password: "p", domain: nil, schemes: [.basic], allowBasicOverHTTP: false)
        }
        #expect(
            UpstreamClient.choose(
                configured: row.configured, network: network, throughParent: row.throughParent,
                upstreamScheme: row.scheme, isUpgrade: row.upgrade) == row.expected)
    }
}
