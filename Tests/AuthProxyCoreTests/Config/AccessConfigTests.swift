import Testing

@testable import AuthProxyCore

@Suite struct AccessConfigTests {
    let loader = ConfigLoader(environment: ["TEAM_A_PW": "pw-from-env"])

    @Test func defaultsAreLoopbackOnly() throws {
        let c = try loader.parse("")
        #expect(c.allowClients == AddressBlock.loopback)
        #expect(!c.allowClientsSet)
        #expect(c.denyDestinations == AddressBlock.defaultDenied)
        #expect(c.clients.isEmpty)
        #expect(c.effectiveMaxConnectionsPerClient == 2500)
    }

    @Test func accessSettings() throws {
        let c = try loader.parse(
            """
            [proxy]
            listen = ["0.0.0.0:3128"]
            allow_clients = ["10.42.0.0/16", "::1/128"]
            deny_destinations = []
            max_connections = 100
            max_connections_per_client = 10

            [[credential]]
            name = "team-a"
            type = "api-key"
            key = "k"
            match = "https://a.example/arcgis"
            rate_limit = { requests = 600, per_seconds = 60 }
            allow_jsonp = true

            [[client]]
            name = "alice"
            password = "${TEAM_A_PW}"
            credentials = ["team-a"]

            [[client]]
            name = "ops"
            password = "pw"
            """)
        #expect(c.allowClientsSet)
        #expect(c.allowClients.map(\.description) == ["10.42.0.0/16", "::1/128"])
        #expect(c.denyDestinations.isEmpty)
        #expect(c.effectiveMaxConnectionsPerClient == 10)
        #expect(c.credentials[0].rateLimit == RateLimit(requests: 600, perSeconds: 60))
        #expect(c.credentials[0].allowJSONP)
        #expect(c.clients.map(\.name) == ["alice", "ops"])
        #expect(c.clients[0].credentials == ["team-a"])
        #expect(c.clients[1].credentials == nil)
        #expect(c.clients[0].verify(password: Array("pw-from-env".utf8)))
    }

    @Test(arguments: [
        // The open relay: a non-loopback listener with no access control.
        ("[proxy]\nlisten = [\"0.0.0.0:3128\"]\n", "proxy.listen", 2, "open relay"),
        ("[proxy]\nlisten = [\"127.0.0.1:1\", \"[::]:3128\"]\n", "proxy.listen", 2, "allow_clients"),
        ("[proxy]\nallow_clients = [\"10.0.0.0/33\"]\n", "proxy.allow_clients", 2, "not a CIDR block"),
        ("[proxy]\ndeny_destinations = [\"nope\"]\n", "proxy.deny_destinations", 2, "not a CIDR block"),
        ("[[client]]\nname = \"a\"\n", "client[0].password", 1, "needs a password"),
        ("[[client]]\nname = \"a:b\"\npassword = \"x\"\n", "client[0].name", 2, "may not contain ':'"),
        (
            "[[client]]\nname = \"a\"\npassword = \"x\"\n[[client]]\nname = \"a\"\npassword = \"y\"\n",
            "client[1].name", 5, "duplicate client"
        ),
        (
            "[[client]]\nname = \"a\"\npassword = \"x\"\ncredentials = [\"missing\"]\n", "client[0].credentials", 4,
            "not defined"
        ),
        ("[[client]]\nname = \"a\"\npassword = \"x\"\nrole = \"admin\"\n", "client[0].role", 4, "unknown key"),
        (
            "[[credential]]\nname = \"a\"\ntype = \"api-key\"\nkey = \"k\"\nmatch = \"http://h\"\nrate_limit = { requests = 5 }\n",
            "credential[0].rate_limit", 6, "per_seconds"
        ),
    ])
    func rejects(_ text: String, _ key: String, _ line: Int, _ fragment: String) {
        expectRejected(loader, text, key: key, line: line, fragment: fragment)
    }

    @Test func clientsAloneOpenEveryAddressToAuthentication() throws {
        let c = try loader.parse("[proxy]\nlisten = [\"0.0.0.0:3128\"]\n[[client]]\nname = \"a\"\npassword = \"x\"\n")
        #expect(c.allowClients == AddressBlock.everywhere)
        let narrowed = try loader.parse(
            "[proxy]\nallow_clients = [\"10.0.0.0/8\"]\n[[client]]\nname = \"a\"\npassword = \"x\"\n")
        #expect(narrowed.allowClients.map(\.description) == ["10.0.0.0/8"])
    }

    @Test func exposedListenerWithAccessControlIsAccepted() throws {
        _ = try loader.parse("[proxy]\nlisten = [\"0.0.0.0:3128\"]\nallow_clients = [\"10.0.0.0/8\"]\n")
        _ = try loader.parse("[proxy]\nlisten = [\"0.0.0.0:3128\"]\n[[client]]\nname = \"a\"\npassword = \"x\"\n")
        _ = try loader.parse("[proxy]\nlisten = [\"127.0.0.2:3128\", \"[::1]:3128\"]\n")
    }
}
