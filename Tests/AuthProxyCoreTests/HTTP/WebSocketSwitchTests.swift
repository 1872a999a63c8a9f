import Testing

@testable import AuthProxyCore

/// Which `101 Switching Protocols` may become a byte relay: `Upgrade: websocket` alone and the accept value that
/// answers the request's key (RFC 6455 §4.1); everything else is refused with its reason.
@Suite struct WebSocketSwitchTests {
    /// RFC 6455 §1.3's example.
    static let key = "dGhlIHNhbXBsZSBub25jZQ=="
    static let accept = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="

    @Test func theAcceptValueIsTheRFCs() {
        #expect(WebSocketSwitch.accept(forKey: Self.key) == Self.accept)
        #expect(WebSocketSwitch.accept(forKey: "x3JJHMbDL1EzLkh9GBhXDw==") == "HSmrc0sMlYUkAGmm5OPpG2HaGWk=")
    }

    @Test func aWebSocketSwitchAnsweringTheKeyIsRelayed() {
        #expect(WebSocketSwitch.check(requestKeys: [Self.key], upgrade: ["websocket"], accept: [Self.accept]) == nil)
        // Case of the protocol name and surrounding whitespace do not matter.
        #expect(
            WebSocketSwitch.check(requestKeys: [" \(Self.key)"], upgrade: [" WebSocket "], accept: [Self.accept + " "])
                == nil)
    }

    @Test(arguments: [
        (["h2c"], WebSocketSwitch.Refusal.notWebSocket("h2c")),
        (["websocket, h2c"], .notWebSocket("websocket, h2c")),
        (["websocket", "h2c"], .notWebSocket("websocket, h2c")),
        ([], .notWebSocket(nil)),
        (["websocket/13"], .notWebSocket("websocket/13")),
    ])
    func anotherProtocolIsRefused(upgrade: [String], expected: WebSocketSwitch.Refusal) {
        #expect(WebSocketSwitch.check(requestKeys: [Self.key], upgrade: upgrade, accept: [Self.accept]) == expected)
    }

    @Test func aWrongMissingOrRepeatedAcceptIsRefused() {
        func check(_ accept: [String]) -> WebSocketSwitch.Refusal? {
            WebSocketSwitch.check(requestKeys: [Self.key], upgrade: ["websocket"], accept: accept)
        }
        #expect(check(["HSmrc0sMlYUkAGmm5OPpG2HaGWk="]) == .acceptMismatch)
        #expect(check([Self.key]) == .acceptMismatch)
        #expect(check([""]) == .acceptMismatch)
        #expect(check([Self.accept.lowercased()]) == .acceptMismatch)
        #expect(check([]) == .noAccept)
        #expect(check([Self.accept, Self.accept]) == .noAccept)
    }

    @Test func aHandshakeWithoutASingleKeyCannotBeChecked() {
        for keys in [[], [""], [Self.key, Self.key]] {
            #expect(
                WebSocketSwitch.check(requestKeys: keys, upgrade: ["websocket"], accept: [Self.accept])
                    == .noRequestKey, "\(keys)")
        }
    }

    @Test func reasonsNameWhatWasWrong() {
        #expect("\(WebSocketSwitch.Refusal.notWebSocket("h2c"))".contains("h2c"))
        #expect("\(WebSocketSwitch.Refusal.acceptMismatch)".contains("Sec-WebSocket-Accept"))
        let long = String(repeating: "x", count: 500)
        #expect("\(WebSocketSwitch.Refusal.notWebSocket(long))".count < 200)
    }
}
