import Testing

@testable import AuthProxyCore

/// The pure pieces of WebSocket relaying: which requests are handshakes, `ws`/`wss` read as `http`/`https`, what
/// the first bytes inside a CONNECT to a matched host are, the machine's `101` and first-bytes events, and the
/// `101` head written to the client.
@Suite struct WebSocketPiecesTests {
    private func head(_ text: String) -> RequestHead? {
        var p = RequestHeadParser()
        let bytes = Array(text.utf8)
        if case .complete(let h, _) = bytes.withUnsafeBytes({ p.parse($0) }) { return h }
        return nil
    }

    // MARK: handshake detection

    @Test func aWebSocketHandshakeIsAnUpgrade() {
        let h = head(
            "GET http://gis.example/arcgis/rest/services/Q/StreamServer/subscribe HTTP/1.1\r\nHost: gis.example\r\n"
                + "Upgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n")
        #expect(h?.upgrade == "websocket")
    }

    /// Only `websocket` is offered upstream, whatever else the client listed: a server that picked `h2c` would get
    /// a raw relay that the proxy parses no more.
    @Test(arguments: ["websocket, h2c", "h2c, WebSocket", "WEBSOCKET", "h2c,websocket/13, websocket"])
    func otherProtocolsAreStrippedFromTheUpgradeSentUpstream(upgrade: String) {
        let h = head(
            "GET http://h/s HTTP/1.1\r\nHost: h\r\nUpgrade: \(upgrade)\r\nConnection: Upgrade\r\n"
                + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
        #expect(h?.upgrade == "websocket")
    }

    @Test(arguments: [
        // Upgrade not listed in Connection: hop-by-hop, dropped as before.
        "GET http://h/ HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\r\n",
        // Another protocol (h2c) is not relayed.
        "GET http://h/ HTTP/1.1\r\nHost: h\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\n\r\n",
        // Not a GET, or with a body, or HTTP/1.0.
        "POST http://h/ HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nContent-Length: 2\r\n\r\n",
        "GET http://h/ HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nContent-Length: 2\r\n\r\n",
        "GET http://h/ HTTP/1.0\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        // Connection: upgrade without an Upgrade field.
        "GET http://h/ HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\n\r\n",
    ])
    func otherRequestsAreNot(text: String) {
        let h = head(text)
        #expect(h != nil)
        #expect(h?.upgrade == nil)
    }

    // MARK: ws and wss

    @Test func wsAndWssTargetsAreReadAsHTTPAndHTTPS() throws {
        #expect(
            try RequestHeadParser.parseTarget(method: "GET", "ws://h:8080/a?token=x")
                == .absolute(URLTarget(scheme: "http", host: "h", port: 8080, pathAndQuery: "/a?token=x")))
        #expect(
            try RequestHeadParser.parseTarget(method: "GET", "WS://h/a")
                == .absolute(URLTarget(scheme: "http", host: "h", port: 80, pathAndQuery: "/a")))
        #expect(
            try RequestHeadParser.parseTarget(method: "GET", "wss://h/a")
                == .absolute(URLTarget(scheme: "https", host: "h", port: 443, pathAndQuery: "/a")))
        #expect(throws: HTTPParseError.self) { try RequestHeadParser.parseTarget(method: "GET", "wsx://h/a") }
    }

    @Test func wsPrefixesMatchAsTheirHTTPOnes() throws {
        let ws = try #require(MatchPrefix.parse("ws://gis.example:8080/arcgis"))
        #expect(ws == MatchPrefix.parse("http://gis.example:8080/arcgis"))
        #expect(ws.matches(URLTarget(scheme: "http", host: "gis.example", port: 8080, pathAndQuery: "/arcgis/rest/x")))
        #expect(
            !ws.matches(URLTarget(scheme: "https", host: "gis.example", port: 8080, pathAndQuery: "/arcgis/rest/x")))
        let wss = try #require(MatchPrefix.parse("wss://gis.example/arcgis"))
        #expect(wss.scheme == "https" && wss.effectivePort == 443)
        #expect(MatchPrefix.parse("ftp://gis.example/") == nil)
    }

    // MARK: first bytes inside a tunnel

    private func classify(_ bytes: [UInt8]) -> TunnelContent {
        bytes.withUnsafeBytes { TunnelContent.classify($0) }
    }

    @Test func firstBytesAreClassified() {
        #expect(classify([]) == .needMore)
        #expect(classify([0x16]) == .tls)
        #expect(classify([0x16, 0x03, 0x01, 0x02, 0x00]) == .tls)
        #expect(classify(Array("GET /arcgis HTTP/1.1\r\n".utf8)) == .http)
        #expect(classify(Array("OPTIONS * HTTP/1.1\r\n".utf8)) == .http)
        #expect(classify(Array("GET http://h/ HTTP/1.1\r\n".utf8)) == .http)
        #expect(classify(Array("GE".utf8)) == .needMore)
        #expect(classify(Array("GET ".utf8)) == .needMore)
        #expect(classify([0x00, 0x01, 0x02]) == .other)
        #expect(classify(Array("get / HTTP/1.1\r\n".utf8)) == .other)
        #expect(classify(Array("GET  / HTTP/1.1".utf8)) == .other)
        #expect(classify(Array("SSH-2.0-OpenSSH_9.2\r\n".utf8)) == .other)
        #expect(classify(Array(String(repeating: "A", count: 30).utf8)) == .other)
    }

    // MARK: the machine

    typealias M = ExchangeStateMachine

    @Test func a101TurnsTheExchangeIntoARelay() {
        var m = M(limits: .init(seconds: 10, idle: 60, upstream: 30), now: 0)
        _ = m.nextInputStep(buffered: 100, now: 0)
        m.requestBegan(.init(), shuttingDown: false, now: 0)
        m.transferStarted(inspect: true, now: 0)
        let upgraded = m.upgraded()
        #expect(upgraded)
        guard case .tunnel(let e) = m.state else {
            Issue.record("not relaying: \(m.state)")
            return
        }
        #expect(e.status == 101 && !e.keepAlive)
        #expect(m.readInterest(buffered: 0, limit: 10) == .leave)
        #expect(m.clientEOF(pendingOutput: 0) == .tunnel)
        #expect(m.tick(now: 1_000 * 1_000_000_000, clientPending: 0, lastSendProgress: 0) == .tunnel)
        #expect(m.graceExpired() == .tunnel)
        // No exchange, no relay.
        var idle = M(limits: .init(seconds: 10, idle: 60, upstream: 30), now: 0)
        let idleUpgraded = idle.upgraded()
        #expect(!idleUpgraded)
    }

    @Test func firstBytesEventsOfAServedTunnel() {
        var m = M(limits: .init(seconds: 10, idle: 60, upstream: 30), now: 0)
        _ = m.nextInputStep(buffered: 100, now: 0)
        m.requestBegan(.init(), shuttingDown: false, now: 0)
        #expect(m.answerLocally(status: 200, close: false) == true)
        m.servedTunnelStarted(now: 1)
        #expect(m.state == .awaitingTunnelContent(since: 1))
        #expect(m.nextInputStep(buffered: 0, now: 1) == .wait)
        #expect(m.nextInputStep(buffered: 5, now: 1) == .classifyTunnel)
        // Nothing arrives: the header timeout closes it.
        #expect(m.tick(now: 12 * 1_000_000_000, clientPending: 0, lastSendProgress: 0) == .close)
        var blind = m
        blind.tunnelAfterFirstBytes(started: 0)
        if case .tunnel(let e) = blind.state { #expect(e.status == 200) } else { Issue.record("\(blind.state)") }
        var refused = m
        refused.tunnelContentRefused(started: 0)
        #expect(refused.answerLocally(status: 400, close: true) == false)
        #expect(refused.endExchange(shuttingDown: false, now: 2) == .close)
    }

    // MARK: the 101 head

    @Test func the101HeadKeepsUpgradeAndConnectionAndDropsOtherHopByHopFields() {
        var a = ResponseHeadAssembler(capacity: 0)
        for line in [
            "HTTP/1.1 101 Switching Protocols", "Upgrade: websocket", "Connection: Upgrade, X-Hop",
            "X-Hop: 1", "Keep-Alive: 5", "Sec-WebSocket-Accept: abc=", "",
        ] {
            let bytes = Array((line + "\r\n").utf8)
            _ = bytes.withUnsafeBytes { a.add(line: $0) }
        }
        var out = ByteBuffer()
        a.writeSwitchingProtocols(into: &out, upgrade: "websocket", via: "1.1 authproxy")
        let text = out.withUnreadBytes { String(decoding: $0, as: UTF8.self) }
        #expect(
            text == "HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: abc=\r\nUpgrade: websocket\r\n"
                + "Connection: Upgrade\r\nVia: 1.1 authproxy\r\n\r\n")
    }
}
